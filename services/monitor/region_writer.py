"""Writes HAMi-core shared-region images in either layout.

In production only HAMi-core writes these files. This writer exists for the simulator (so a
simulated node can exercise the real file-reading path), the benchmark and tests. Pure: it
returns a ``bytearray`` (and can update one in place); writing it to disk is the caller's job.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.monitor.region import MAGIC, MAX_DEVICES, MAX_PROCS, UUID_BYTES, V0, V1, Layout

LAYOUTS = {0: V0, 1: V1}


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotDevice:
    """One process's use of one device (bytes; ``sm_util`` percent)."""

    total: int = 0
    context: int = 0
    module: int = 0
    buffer: int = 0
    sm_util: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Proc:
    """One process slot: its pids, status (non-zero = live) and per-device use."""

    pid: int = 1
    hostpid: int = 0
    status: int = 1
    devices: tuple[SlotDevice, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionDevice:
    uuid: str
    limit_bytes: int = 0
    sm_limit: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionImage:
    """What to write; ``procnum`` defaults to ``len(procs)``."""

    version: int = 1
    minor: int = 0
    devices: tuple[RegionDevice, ...] = ()
    procs: tuple[Proc, ...] = ()
    procnum: int | None = None
    last_kernel_time: int = 0
    priority: int = 1
    recent_kernel: int = 0
    utilization_switch: int = 0
    magic: int = MAGIC
    extra: bytes = field(default=b"")
    """Bytes appended after the layout (HAMi-core files may be larger than the struct)."""


def build_region(image: RegionImage) -> bytearray:
    lay = LAYOUTS[image.version]
    buf = bytearray(lay.size)
    _write_header(buf, lay, image)
    write_procs(buf, image.version, image.procs, image.procnum)
    return buf + image.extra


def write_procs(buf: bytearray, version: int, procs: Sequence[Proc], procnum: int | None = None) -> None:
    """(Re)write the process slots and ``procnum`` of an existing image in place."""
    lay = LAYOUTS[version]
    if len(procs) > MAX_PROCS:
        raise ValueError(f"at most {MAX_PROCS} process slots")
    for n, proc in enumerate(procs):
        slot = lay.procs + n * lay.slot_size
        struct.pack_into("<ii", buf, slot, proc.pid, proc.hostpid)
        for i, dev in enumerate(proc.devices):
            used = slot + lay.slot_used + i * lay.used_stride
            struct.pack_into("<5Q", buf, used, dev.context, dev.module, dev.buffer, 0, dev.total)
            struct.pack_into("<Q", buf, slot + lay.slot_util + i * lay.util_stride + 16, dev.sm_util)
        struct.pack_into("<i", buf, slot + lay.slot_status, proc.status)
    struct.pack_into("<i", buf, lay.procnum, len(procs) if procnum is None else procnum)


def _write_header(buf: bytearray, lay: Layout, image: RegionImage) -> None:
    if len(image.devices) > MAX_DEVICES:
        raise ValueError(f"at most {MAX_DEVICES} devices")
    struct.pack_into("<i", buf, 0, image.magic)
    if lay.version >= 1:
        struct.pack_into("<ii", buf, 4, lay.version, image.minor)
    struct.pack_into("<Q", buf, lay.num, len(image.devices))
    for i, dev in enumerate(image.devices):
        raw = dev.uuid.encode("ascii")[:UUID_BYTES]
        buf[lay.uuids + i * UUID_BYTES : lay.uuids + i * UUID_BYTES + len(raw)] = raw
        struct.pack_into("<Q", buf, lay.limit + 8 * i, dev.limit_bytes)
        struct.pack_into("<Q", buf, lay.sm_limit + 8 * i, dev.sm_limit)
    struct.pack_into(
        "<iii", buf, lay.utilization_switch, image.utilization_switch, image.recent_kernel, image.priority
    )
    if lay.last_kernel_time is not None:
        struct.pack_into("<q", buf, lay.last_kernel_time, image.last_kernel_time)
