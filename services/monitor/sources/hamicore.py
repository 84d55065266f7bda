"""Usage from HAMi-core's per-container shared regions under ``<hook path>/containers``.

Each ``<podUID>_<container>/`` directory holds one ``*.cache`` file that HAMi-core maps into
every CUDA process of the container. Files are mapped read-only once and kept mapped across
cycles (re-mapped when the inode or size changes); decoding is :func:`region.parse_region`.
A truncated, foreign or unreadable file is skipped and reported as a :class:`Defect`, never
raised. Only a missing or unreadable hook directory fails the source as a whole.
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from services.monitor.errors import RegionError, SourceUnavailable
from services.monitor.ledger import Ledger
from services.monitor.readings import ContainerReading, Defect, DefectReason, DeviceReading, SourceReading
from services.monitor.region import Region, parse_region

log = logging.getLogger(__name__)

CONTAINERS_DIR = "containers"


@dataclass(slots=True)
class _Mapped:
    ino: int
    size: int
    mm: mmap.mmap


def split_dir_name(name: str) -> tuple[str, str] | None:
    """``<podUID>_<container>`` -> its parts (container names cannot hold ``_``, pod UIDs neither)."""
    uid, sep, container = name.partition("_")
    if not sep or not uid or not container:
        return None
    return uid, container


class HamiCoreSource:
    """Reads every container's shared region under ``hook_path/containers`` each cycle."""

    name = "hami-core"

    def __init__(self, hook_path: Path) -> None:
        self.containers_dir = hook_path / CONTAINERS_DIR
        self._maps: dict[str, _Mapped] = {}

    def collect(self, ledger: Ledger, now: float) -> SourceReading:
        try:
            entries = [e for e in os.scandir(self.containers_dir) if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            self._unmap_except(set())
            return SourceReading()  # no container has used CUDA yet: nothing to read, not a failure
        except OSError as e:
            raise SourceUnavailable(f"cannot list {self.containers_dir}: {e.strerror or e}") from e
        containers: list[ContainerReading] = []
        defects: list[Defect] = []
        for entry in entries:
            reading = self._read_dir(entry, defects)
            if reading is not None:
                containers.append(reading)
        self._unmap_except({e.name for e in entries})
        return SourceReading(containers=tuple(containers), defects=tuple(defects))

    def close(self) -> None:
        self._unmap_except(set())

    def _read_dir(self, entry: os.DirEntry[str], defects: list[Defect]) -> ContainerReading | None:
        names = split_dir_name(entry.name)
        if names is None:
            defects.append(
                Defect(
                    where=entry.path, reason=DefectReason.BAD_DIR_NAME, detail="expected <podUID>_<container>"
                )
            )
            return None
        try:
            region = self._region(entry, defects)
        except RegionError as e:
            self._unmap(entry.name)
            defects.append(Defect(where=entry.path, reason=DefectReason(e.reason), detail=e.detail))
            return None
        if region is None:
            return None
        return _reading(names[0], names[1], region)

    def _region(self, entry: os.DirEntry[str], defects: list[Defect]) -> Region | None:
        path = self._cache_file(entry, defects)
        if path is None:
            self._unmap(entry.name)
            return None
        mapped = self._map(entry.name, path)
        return parse_region(mapped.mm)

    def _cache_file(self, entry: os.DirEntry[str], defects: list[Defect]) -> str | None:
        """The directory's one ``*.cache`` file; None when there is none yet (or too many)."""
        try:
            found = [
                f.path for f in os.scandir(entry.path) if ".cache" in f.name and "libvgpu.so" not in f.name
            ]
        except OSError as e:
            raise RegionError(DefectReason.UNREADABLE, f"cannot list: {e.strerror or e}") from e
        if len(found) > 1:
            defects.append(
                Defect(
                    where=entry.path, reason=DefectReason.TOO_MANY_FILES, detail=f"{len(found)} cache files"
                )
            )
            return None
        return found[0] if found else None

    def _map(self, key: str, path: str) -> _Mapped:
        try:
            st = os.stat(path)
            current = self._maps.get(key)
            if current is not None and current.ino == st.st_ino and current.size == st.st_size:
                return current
            self._unmap(key)
            if st.st_size == 0:
                raise RegionError(DefectReason.TRUNCATED, "empty file")
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), st.st_size, access=mmap.ACCESS_READ)
        except OSError as e:
            raise RegionError(DefectReason.UNREADABLE, f"{path}: {e.strerror or e}") from e
        mapped = _Mapped(ino=st.st_ino, size=st.st_size, mm=mm)
        self._maps[key] = mapped
        return mapped

    def _unmap(self, key: str) -> None:
        mapped = self._maps.pop(key, None)
        if mapped is not None:
            mapped.mm.close()

    def _unmap_except(self, keep: set[str]) -> None:
        for key in [k for k in self._maps if k not in keep]:
            self._unmap(key)


def _reading(pod_uid: str, container: str, region: Region) -> ContainerReading:
    return ContainerReading(
        pod_uid=pod_uid,
        container=container,
        last_kernel_time=region.last_kernel_time,
        devices=tuple(
            DeviceReading(
                uuid=d.uuid,
                vindex=d.index,
                used_bytes=d.used_bytes,
                limit_bytes=d.limit_bytes,
                sm_util=float(d.sm_util),
                context_bytes=d.context_bytes,
                module_bytes=d.module_bytes,
                buffer_bytes=d.buffer_bytes,
            )
            for d in region.devices
        ),
    )
