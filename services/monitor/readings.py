"""What a usage source reports: per-container and per-host device readings, and skipped inputs.

Plain values and the :class:`UsageSource` port. A source says what it saw (bytes, raw
utilisation, limits when it knows them); it does not know pods' names or their slices:
:mod:`services.monitor.accounting` joins readings with the allocation ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from shared.codec import INT_MAX

if TYPE_CHECKING:
    from services.monitor.ledger import Ledger

#: The largest byte count the monitor passes on: the largest int an event may carry (consumers
#: refuse larger ones); no device has anywhere near as much.
MAX_BYTES = INT_MAX


class DefectReason(StrEnum):
    """Why an input was skipped; the ``reason`` label of ``gpubus_monitor_decode_errors_total``."""

    TRUNCATED = "truncated"
    """Smaller than the smallest known shared-region layout, or shrunk while being read."""
    BAD_MAGIC = "bad_magic"
    """Not a HAMi-core shared region (magic 19920718 missing)."""
    UNKNOWN_VERSION = "unknown_version"
    """A magic we know with a size/major version we do not."""
    BAD_DEVICE_COUNT = "bad_device_count"
    """The region claims more devices than its 16 slots."""
    BAD_UUID = "bad_uuid"
    """A device UUID that is not printable ASCII."""
    TOO_MANY_FILES = "too_many_files"
    """A container directory with more than one ``*.cache`` file (HAMi refuses it too)."""
    BAD_DIR_NAME = "bad_dir_name"
    """A container directory not named ``<podUID>_<container>``."""
    UNREADABLE = "unreadable"
    """The file could not be opened or read, or is not a regular file."""
    OUT_OF_RANGE = "out_of_range"
    """A byte count that cannot be real (beyond :data:`MAX_BYTES`, e.g. process slots summed past
    2**64-1); one such value would make the node's whole ``usage.sample`` unpublishable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Defect:
    """One skipped input: where, why, and a human detail for the log."""

    where: str
    reason: DefectReason
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceReading:
    """One device as one container uses it. ``vindex`` is the device's index inside the container."""

    uuid: str
    vindex: int = 0
    used_bytes: int
    limit_bytes: int = 0
    """What the source itself says the limit is (HAMi-core's region); 0 when it does not know."""
    sm_util: float = 0.0
    """Raw SM utilisation as the source reports it, percent of the device (may exceed 100 summed)."""
    context_bytes: int = 0
    module_bytes: int = 0
    buffer_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerReading:
    pod_uid: str
    container: str
    devices: tuple[DeviceReading, ...]
    last_kernel_time: int = 0
    """Unix seconds of the container's last kernel launch; 0 when unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostReading:
    """A physical device as the host sees it (NVML or the simulator)."""

    uuid: str
    index: int
    type: str
    """HAMi device type, ``NVIDIA-`` + model name."""
    used_bytes: int
    gpu_util: float = 0.0
    """Percent 0..100, as NVML reports it (HAMi exports it unscaled)."""
    memory_util: float = 0.0
    """Memory controller utilisation, percent 0..100."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceReading:
    """Everything one source saw in one collection."""

    containers: tuple[ContainerReading, ...] = ()
    host: tuple[HostReading, ...] = ()
    defects: tuple[Defect, ...] = ()
    unattributed: int = 0
    """Processes on the GPUs that could not be tied to a pod in the ledger."""


class UsageSource(Protocol):
    """A way of seeing usage on one node. ``collect`` may raise ``SourceUnavailable``."""

    @property
    def name(self) -> str: ...

    def collect(self, ledger: Ledger, now: float) -> SourceReading: ...

    def close(self) -> None: ...


def screen(reading: SourceReading) -> SourceReading:
    """``reading`` less the containers and host devices whose byte counts cannot be real, as defects.

    Sources pass on what they saw, and a container can write any number into its own shared
    region. One value past :data:`MAX_BYTES` would make the node's whole ``usage.sample`` fail to
    encode, so that one container (or host device) is dropped and counted instead.
    """
    defects = list(reading.defects)
    containers = []
    for c in reading.containers:
        if why := _container_out_of_range(c):
            defects.append(
                Defect(where=f"{c.pod_uid}_{c.container}", reason=DefectReason.OUT_OF_RANGE, detail=why)
            )
        else:
            containers.append(c)
    host = []
    for h in reading.host:
        if why := _out_of_range("used_bytes", h.used_bytes):
            defects.append(Defect(where=f"host {h.uuid}", reason=DefectReason.OUT_OF_RANGE, detail=why))
        else:
            host.append(h)
    if len(defects) == len(reading.defects):
        return reading
    return replace(reading, containers=tuple(containers), host=tuple(host), defects=tuple(defects))


def _container_out_of_range(c: ContainerReading) -> str:
    for d in c.devices:
        # one test per device: the OR of ints in [0, 2**63) stays there, any other value leaves it
        if (
            not 0
            <= d.used_bytes | d.limit_bytes | d.context_bytes | d.module_bytes | d.buffer_bytes
            <= MAX_BYTES
        ):
            whys = (_out_of_range(name, getattr(d, name)) for name in _DEVICE_BYTES)
            return f"device {d.uuid}: " + "; ".join(w for w in whys if w)
    return ""


_DEVICE_BYTES = ("used_bytes", "limit_bytes", "context_bytes", "module_bytes", "buffer_bytes")


def _out_of_range(name: str, value: int) -> str:
    return "" if 0 <= value <= MAX_BYTES else f"{name} {value} is not a byte count (0 to 2**63-1)"
