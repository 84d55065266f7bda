"""HAMi-core's per-container shared region: the two on-disk layouts and a pure decoder.

HAMi-core (``libvgpu.so``, an external component) keeps a ``*.cache`` file per container in
which every CUDA process of the container accounts its memory and SM use per device. This
module knows the byte layouts (v0 before HAMi-core 1.2, v1 after; offsets in the reference,
hami-contract §7) and turns their bytes into a :class:`Region`. It does no I/O: a reader fetches
only the three ranges the decoder needs (the head up to the process slots, the tail fields from
``procnum`` on, and the slots ``[0, procnum)``; see :func:`decode`), or passes a whole file to
:func:`parse_region`. It must not know about pods, ledgers or metrics.

Per device, values are summed over the process slots ``[0, procnum)`` whose ``status`` is
non-zero (HAMi-core compacts the slot table and marks live slots with a non-zero status).
"""

from __future__ import annotations

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

RegionBytes = bytes | bytearray | memoryview


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

    @property
    def tail_size(self) -> int:
        """Bytes from ``procnum`` to the end of the layout: every field after the process slots."""
        return self.size - self.procnum


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

#: Bytes a reader fetches first: every layout's head (up to its process slots) fits in them.
HEAD_BYTES = max(V0.procs, V1.procs)
#: The longest tail (:attr:`Layout.tail_size`) of any layout.
TAIL_BYTES = max(V0.tail_size, V1.tail_size)

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


def layout_for(size: int, head: RegionBytes) -> Layout:
    """The layout of a file of ``size`` bytes starting with ``head``, or :class:`RegionError`."""
    if min(size, len(head)) < _HEADER.size:
        raise RegionError(
            DefectReason.TRUNCATED, f"{min(size, len(head))} bytes, smaller than a region header"
        )
    magic, major, minor = _HEADER.unpack_from(head, 0)
    if magic != MAGIC:
        raise RegionError(DefectReason.BAD_MAGIC, f"magic {magic} is not {MAGIC}")
    if size >= V1.size and major == 1:
        return V1
    if V0.size <= size < V1.size:
        return V0
    if size < V0.size:
        raise RegionError(DefectReason.TRUNCATED, f"{size} bytes, smaller than the v0 layout ({V0.size})")
    raise RegionError(DefectReason.UNKNOWN_VERSION, f"{size} bytes with version {major}.{minor}")


def slot_count(lay: Layout, head: RegionBytes, tail: RegionBytes) -> int:
    """How many process slots :func:`decode` reads: ``procnum`` clamped, none without devices."""
    return _counts(lay, head, tail)[1]


def _counts(lay: Layout, head: RegionBytes, tail: RegionBytes) -> tuple[int, int]:
    """(devices, process slots to read); TRUNCATED when ``head`` or ``tail`` came back short."""
    _need(head, lay.procs, "head")
    _need(tail, lay.tail_size, "tail")
    num: int = _U64.unpack_from(head, lay.num)[0]
    if num == 0 or num > MAX_DEVICES:
        return num, 0
    return num, min(max(_I32.unpack_from(tail, 0)[0], 0), MAX_PROCS)


def parse_region(buf: RegionBytes) -> Region:
    """Decode a whole region file; :class:`RegionError` (never anything else) when it cannot be read."""
    view = memoryview(buf)
    lay = layout_for(len(view), view)
    head, tail = view[: lay.procs], view[lay.procnum : lay.size]
    slots = view[lay.procs : lay.procs + slot_count(lay, head, tail) * lay.slot_size]
    return decode(lay, head, tail, slots)


def decode(lay: Layout, head: RegionBytes, tail: RegionBytes, slots: RegionBytes) -> Region:
    """Decode from the file's bytes ``[0, lay.procs)`` (``head``), ``[lay.procnum, lay.size)``
    (``tail``) and the :func:`slot_count` slots from ``lay.procs`` on (``slots``); any range
    shorter than that (a file that shrank while read) is :attr:`DefectReason.TRUNCATED`."""
    num, count = _counts(lay, head, tail)
    _need(slots, count * lay.slot_size, "process slots")
    if num > MAX_DEVICES:
        raise RegionError(DefectReason.BAD_DEVICE_COUNT, f"{num} devices, at most {MAX_DEVICES}")
    sums, live = _sum_slots(slots, lay, num, count)
    devices = tuple(
        _device(head, lay, i, sums[i]) for i in range(num) if head[lay.uuids + i * UUID_BYTES] != 0
    )
    at = lay.procnum
    last_kernel = 0 if lay.last_kernel_time is None else _I64.unpack_from(tail, lay.last_kernel_time - at)[0]
    return Region(
        version=lay.version,
        minor=_I32.unpack_from(head, 8)[0] if lay.version >= 1 else 0,
        devices=devices,
        live_procs=live,
        last_kernel_time=max(last_kernel, 0),
        priority=_I32.unpack_from(tail, lay.priority - at)[0],
        recent_kernel=_I32.unpack_from(tail, lay.recent_kernel - at)[0],
        utilization_switch=_I32.unpack_from(tail, lay.utilization_switch - at)[0],
    )


def _need(buf: RegionBytes, size: int, what: str) -> None:
    if len(buf) < size:
        raise RegionError(DefectReason.TRUNCATED, f"{what}: {len(buf)} of {size} bytes (the file shrank)")


def _sum_slots(slots: RegionBytes, lay: Layout, num: int, count: int) -> tuple[list[list[int]], int]:
    """Per device ``[ctx, module, buffer, total, sm]`` summed over live slots, and the live count."""
    sums = [[0, 0, 0, 0, 0] for _ in range(num)]
    if num == 0:
        return sums, 0
    used_fmt, util_fmt = _slot_structs(lay, num)
    live = 0
    for slot in range(0, count * lay.slot_size, lay.slot_size):
        if _I32.unpack_from(slots, slot + lay.slot_status)[0] == 0:
            continue
        live += 1
        used = used_fmt.unpack_from(slots, slot + lay.slot_used)
        util = util_fmt.unpack_from(slots, slot + lay.slot_util)
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


def _device(head: RegionBytes, lay: Layout, i: int, acc: list[int]) -> RegionDevice:
    return RegionDevice(
        index=i,
        uuid=_uuid(head, lay.uuids + i * UUID_BYTES),
        limit_bytes=_U64.unpack_from(head, lay.limit + 8 * i)[0],
        sm_limit=_U64.unpack_from(head, lay.sm_limit + 8 * i)[0],
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
