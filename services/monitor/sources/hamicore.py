"""Usage from HAMi-core's per-container shared regions under ``<hook path>/containers``.

Each ``<podUID>_<container>/`` directory holds one ``*.cache`` file that HAMi-core maps into
every CUDA process of the container. The container owns that file and may shrink, replace or
swap it at any moment, so it is never mapped here: touching a mapped page past a shrunken end
raises SIGBUS, which kills the whole monitor (Python cannot catch it). Each cycle opens the file
(regular files only, no symlinks), reads only the ranges :func:`region.decode` needs with
``preadv`` into buffers reused across files and cycles, and closes it again (one process may
watch thousands of containers; it holds no descriptor per container). A file that shrank while
being read comes back short: a TRUNCATED defect. A truncated, foreign or unreadable file is
skipped and reported as a :class:`Defect`, never raised. Only a missing or unreadable hook
directory fails the source as a whole.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from services.monitor.errors import RegionError, SourceUnavailable
from services.monitor.ledger import Ledger
from services.monitor.readings import ContainerReading, Defect, DefectReason, DeviceReading, SourceReading
from services.monitor.region import HEAD_BYTES, TAIL_BYTES, Region, decode, layout_for, slot_count

log = logging.getLogger(__name__)

CONTAINERS_DIR = "containers"

#: No symlinks (the container owns the directory); non-blocking, so a FIFO cannot hang the open.
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def split_dir_name(name: str) -> tuple[str, str] | None:
    """``<podUID>_<container>`` -> its parts (container names cannot hold ``_``, pod UIDs neither)."""
    uid, sep, container = name.partition("_")
    if not sep or not uid or not container:
        return None
    return uid, container


class RegionReader:
    """Reads shared-region files with ``preadv``, never a mapping, into buffers it reuses."""

    def __init__(self) -> None:
        self._fixed = bytearray(HEAD_BYTES + TAIL_BYTES)
        self._slots = bytearray()

    def read(self, path: str) -> Region:
        """The region in ``path``; :class:`RegionError` when it cannot be opened, read or decoded."""
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as e:
            raise RegionError(DefectReason.UNREADABLE, f"{path}: {e.strerror or e}") from e
        try:
            return self._read(fd)
        except OSError as e:
            raise RegionError(DefectReason.UNREADABLE, f"{path}: {e.strerror or e}") from e
        finally:
            os.close(fd)

    def _read(self, fd: int) -> Region:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RegionError(DefectReason.UNREADABLE, "not a regular file")
        fixed = memoryview(self._fixed)
        head = _pread(fd, fixed[: min(st.st_size, HEAD_BYTES)], 0)
        lay = layout_for(st.st_size, head)
        tail = _pread(fd, fixed[HEAD_BYTES : HEAD_BYTES + lay.tail_size], lay.procnum)
        need = slot_count(lay, head, tail) * lay.slot_size
        if len(self._slots) < need:
            self._slots = bytearray(need)  # replaced, not resized: no view of the old one can block it
        return decode(lay, head, tail, _pread(fd, memoryview(self._slots)[:need], lay.procs))


def _pread(fd: int, into: memoryview, offset: int) -> memoryview:
    """``into`` filled from ``offset``, cut to what the file still had (the decoder judges a short read)."""
    return into[: os.preadv(fd, [into], offset)] if len(into) else into


class HamiCoreSource:
    """Reads every container's shared region under ``hook_path/containers`` each cycle."""

    name = "hami-core"

    def __init__(self, hook_path: Path) -> None:
        self.containers_dir = hook_path / CONTAINERS_DIR
        self._reader = RegionReader()

    def collect(self, ledger: Ledger, now: float) -> SourceReading:
        try:
            entries = [e for e in os.scandir(self.containers_dir) if e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return SourceReading()  # no container has used CUDA yet: nothing to read, not a failure
        except OSError as e:
            raise SourceUnavailable(f"cannot list {self.containers_dir}: {e.strerror or e}") from e
        containers: list[ContainerReading] = []
        defects: list[Defect] = []
        for entry in entries:
            reading = self._read_dir(entry, defects)
            if reading is not None:
                containers.append(reading)
        return SourceReading(containers=tuple(containers), defects=tuple(defects))

    def close(self) -> None:
        """Nothing to release: no file stays open between cycles."""

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
            path = self._cache_file(entry, defects)
            if path is None:
                return None
            region = self._reader.read(path)
        except RegionError as e:
            defects.append(Defect(where=entry.path, reason=DefectReason(e.reason), detail=e.detail))
            return None
        return _reading(names[0], names[1], region)

    def _cache_file(self, entry: os.DirEntry[str], defects: list[Defect]) -> str | None:
        """The directory's one ``*.cache`` file; None when there is none yet (or too many)."""
        try:
            found = [f for f in os.scandir(entry.path) if ".cache" in f.name and "libvgpu.so" not in f.name]
            if len(found) == 1 and not found[0].is_file(follow_symlinks=False):
                # a device node or FIFO made by the container is never opened (its open has effects)
                raise RegionError(DefectReason.UNREADABLE, f"{found[0].name}: not a regular file")
        except OSError as e:
            raise RegionError(DefectReason.UNREADABLE, f"cannot list: {e.strerror or e}") from e
        if len(found) > 1:
            defects.append(
                Defect(
                    where=entry.path, reason=DefectReason.TOO_MANY_FILES, detail=f"{len(found)} cache files"
                )
            )
            return None
        return found[0].path if found else None


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
