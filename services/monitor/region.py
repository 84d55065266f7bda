"""HAMi-core's per-container shared region: the two on-disk layouts and a pure decoder.

HAMi-core (``libvgpu.so``, an external component) keeps a ``*.cache`` file per container in
which every CUDA process of the container accounts its memory and SM use per device. This
module knows the byte layouts (v0 before HAMi-core 1.2, v1 after; offsets in the reference,
hami-contract §7) and turns a buffer into a :class:`Region`. It does no I/O: callers pass
bytes, a memoryview or an ``mmap``. It must not know about pods, ledgers or metrics.

Per device, values are summed over the process slots ``[0, procnum)`` whose ``status`` is
non-zero (HAMi-core compacts the slot table and marks live slots with a non-zero status).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from functools import cache

from services.monitor.errors import RegionError
from services.monitor.readings import DefectReason

#: ``initialized_flag`` of every HAMi-core shared region.
MAGIC = 19920718
MAX_DEVICES = 16
MAX_PROCS = 1024
UUID_BYTES = 96
#: HAMi labels devices by the first 40 bytes of the region's UUID field.
UUID_LABEL_BYTES = 40

RegionBytes = bytes | bytearray | memoryview | mmap.mmap


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Byte offsets of one layout version (``slot_*`` are relative to a process slot)."""

    version: int
    size: int
    num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    slot_size: int
    slot_used: int
    used_stride: int
    """Size of one ``{ctx, module, data, offset, total, ...}`` record."""
    slot_util: int
    util_stride: int
    """Size of one ``{dec, enc, sm, ...}`` record."""
    slot_status: int
    procnum: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None


#: HAMi-core < 1.2: no version fields, 5-word memory and 3-word utilisation records.
V0 = Layout(
    version=0,
    size=1_197_896,
    num=48,
    uuids=56,
    limit=1592,
    sm_limit=1720,
    procs=1848,
    slot_size=1168,
    slot_used=8,
    used_stride=40,
    slot_util=776,
    util_stride=24,
    slot_status=1160,
    procnum=1_197_880,
    utilization_switch=1_197_884,
    recent_kernel=1_197_888,
    priority=1_197_892,
    last_kernel_time=None,
)
#: HAMi-core >= 1.2 (``major == 1``): padded records and ``lastKernelTime``.
V1 = Layout(
    version=1,
    size=2_008_952,
    num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    slot_size=1960,
    slot_used=8,
    used_stride=64,
    slot_util=1160,
    util_stride=48,
    slot_status=1928,
    procnum=2_008_896,
    utilization_switch=2_008_900,
    recent_kernel=2_008_904,
    priority=2_008_908,
    last_kernel_time=2_008_912,
)

_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_HEADER = struct.Struct("<iii")  # magic, major (v1) / smInit (v0), minor (v1)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionDevice:
    """One device of a container, summed over its live processes."""

    index: int
    uuid: str
    limit_bytes: int
    sm_limit: int
    used_bytes: int
    """Σ ``total`` (what HAMi exports as the container's device memory)."""
    context_bytes: int
    module_bytes: int
    buffer_bytes: int
    sm_util: int
    """Σ ``sm_util`` of the live processes, percent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Region:
    version: int
    minor: int
    devices: tuple[RegionDevice, ...]
    """Devices with a valid UUID, in region order (the container's CUDA order)."""
    live_procs: int
    last_kernel_time: int
    """Unix seconds; 0 in v0 (the field does not exist) or before the first kernel."""
    priority: int
    recent_kernel: int
    utilization_switch: int


def layout_for(buf: RegionBytes) -> Layout:
    """The layout of ``buf``, or :class:`RegionError` saying why it is not a region we can read."""
    size = len(buf)
    if size < _HEADER.size:
        raise RegionError(DefectReason.TRUNCATED, f"{size} bytes, smaller than a region header")
    magic, major, minor = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise RegionError(DefectReason.BAD_MAGIC, f"magic {magic} is not {MAGIC}")
    if size >= V1.size and major == 1:
        return V1
    if V0.size <= size < V1.size:
        return V0
    if size < V0.size:
        raise RegionError(DefectReason.TRUNCATED, f"{size} bytes, smaller than the v0 layout ({V0.size})")
    raise RegionError(DefectReason.UNKNOWN_VERSION, f"{size} bytes with version {major}.{minor}")


def parse_region(buf: RegionBytes) -> Region:
    """Decode a shared region; :class:`RegionError` (never anything else) when it cannot be read."""
    lay = layout_for(buf)
    num = _U64.unpack_from(buf, lay.num)[0]
    if num > MAX_DEVICES:
        raise RegionError(DefectReason.BAD_DEVICE_COUNT, f"{num} devices, at most {MAX_DEVICES}")
    sums, live = _sum_slots(buf, lay, num)
    devices = tuple(_device(buf, lay, i, sums[i]) for i in range(num) if buf[lay.uuids + i * UUID_BYTES] != 0)
    last_kernel = 0 if lay.last_kernel_time is None else _I64.unpack_from(buf, lay.last_kernel_time)[0]
    return Region(
        version=lay.version,
        minor=_I32.unpack_from(buf, 8)[0] if lay.version >= 1 else 0,
        devices=devices,
        live_procs=live,
        last_kernel_time=max(last_kernel, 0),
        priority=_I32.unpack_from(buf, lay.priority)[0],
        recent_kernel=_I32.unpack_from(buf, lay.recent_kernel)[0],
        utilization_switch=_I32.unpack_from(buf, lay.utilization_switch)[0],
    )


def _sum_slots(buf: RegionBytes, lay: Layout, num: int) -> tuple[list[list[int]], int]:
    """Per device ``[ctx, module, buffer, total, sm]`` summed over live slots, and the live count."""
    sums = [[0, 0, 0, 0, 0] for _ in range(num)]
    if num == 0:
        return sums, 0
    procnum = min(max(_I32.unpack_from(buf, lay.procnum)[0], 0), MAX_PROCS)
    used_fmt, util_fmt = _slot_structs(lay, num)
    live = 0
    for slot in range(lay.procs, lay.procs + procnum * lay.slot_size, lay.slot_size):
        if _I32.unpack_from(buf, slot + lay.slot_status)[0] == 0:
            continue
        live += 1
        used = used_fmt.unpack_from(buf, slot + lay.slot_used)
        util = util_fmt.unpack_from(buf, slot + lay.slot_util)
        for i in range(num):
            acc = sums[i]
            acc[0] += used[4 * i]
            acc[1] += used[4 * i + 1]
            acc[2] += used[4 * i + 2]
            acc[3] += used[4 * i + 3]
            acc[4] += util[i]
    return sums, live


@cache
def _slot_structs(lay: Layout, num: int) -> tuple[struct.Struct, struct.Struct]:
    """Structs reading ``num`` devices' ``ctx, module, data, total`` and ``sm`` out of one slot."""
    used_pad = lay.used_stride - 40
    used = "3Q8xQ" + (f"{used_pad}x" if used_pad else "")  # ctx, module, data, (offset), total
    util_pad = lay.util_stride - 24
    util = "16xQ" + (f"{util_pad}x" if util_pad else "")  # (dec, enc), sm
    return struct.Struct("<" + used * num), struct.Struct("<" + util * num)


def _device(buf: RegionBytes, lay: Layout, i: int, acc: list[int]) -> RegionDevice:
    return RegionDevice(
        index=i,
        uuid=_uuid(buf, lay.uuids + i * UUID_BYTES),
        limit_bytes=_U64.unpack_from(buf, lay.limit + 8 * i)[0],
        sm_limit=_U64.unpack_from(buf, lay.sm_limit + 8 * i)[0],
        context_bytes=acc[0],
        module_bytes=acc[1],
        buffer_bytes=acc[2],
        used_bytes=acc[3],
        sm_util=acc[4],
    )


def _uuid(buf: RegionBytes, offset: int) -> str:
    raw = bytes(buf[offset : offset + UUID_LABEL_BYTES]).split(b"\0", 1)[0]
    if not raw.isascii() or not raw.decode("ascii").isprintable():
        raise RegionError(DefectReason.BAD_UUID, f"device UUID at offset {offset} is not printable ASCII")
    return raw.decode("ascii")
