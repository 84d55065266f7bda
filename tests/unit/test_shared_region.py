"""HAMi-core shared-region decoding, against files written at the documented offsets.

The writer here uses the literal byte offsets of hami-contract §7 (not the decoder's
constants), so a wrong constant in the decoder fails these tests.

Case matrix: layout {v0, v1} x {live slots summed, dead slots (status 0) skipped, slots past
procnum skipped, empty device slots skipped}; bad input {empty, shorter than a header, bad magic,
truncated v0, between layouts with major 2, too many devices, non-ASCII UUID}; the in-repo
writer agrees with the documented offsets in both layouts.
"""

from __future__ import annotations

import struct

import pytest

from services.monitor.errors import RegionError
from services.monitor.readings import DefectReason
from services.monitor.region import parse_region
from services.monitor.region_writer import Proc, RegionDevice, RegionImage, SlotDevice, build_region

MIB = 1 << 20
GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

# Documented layouts: size, num, uuids, limit, smLimit, procs, slot size, used stride,
# monitorused, util offset, util stride, status, procnum, lastKernelTime.
DOC = {
    1: dict(
        size=2_008_952,
        num=56,
        uuids=64,
        limit=1600,
        sm_limit=1728,
        procs=1856,
        slot=1960,
        used=64,
        util=1160,
        util_stride=48,
        status=1928,
        procnum=2_008_896,
        priority=2_008_908,
        lkt=2_008_912,
    ),
    0: dict(
        size=1_197_896,
        num=48,
        uuids=56,
        limit=1592,
        sm_limit=1720,
        procs=1848,
        slot=1168,
        used=40,
        util=776,
        util_stride=24,
        status=1160,
        procnum=1_197_880,
        priority=1_197_892,
        lkt=None,
    ),
}


def documented_file(
    version: int,
    uuids: list[str],
    limits: list[int],
    slots: list[tuple[int, list[tuple[int, int, int, int, int]]]],
    *,
    procnum: int | None = None,
    last_kernel: int = 0,
    magic: int = 19920718,
) -> bytearray:
    """A region at the documented offsets; a slot is (status, [(ctx, module, data, total, sm) per device])."""
    d = DOC[version]
    buf = bytearray(d["size"])
    struct.pack_into("<i", buf, 0, magic)
    if version == 1:
        struct.pack_into("<ii", buf, 4, 1, 2)
    struct.pack_into("<Q", buf, d["num"], len(uuids))
    for i, (uuid, limit) in enumerate(zip(uuids, limits, strict=True)):
        raw = uuid.encode()
        buf[d["uuids"] + 96 * i : d["uuids"] + 96 * i + len(raw)] = raw
        struct.pack_into("<Q", buf, d["limit"] + 8 * i, limit)
        struct.pack_into("<Q", buf, d["sm_limit"] + 8 * i, 30)
    for n, (status, devices) in enumerate(slots):
        base = d["procs"] + n * d["slot"]
        struct.pack_into("<ii", buf, base, 1000 + n, 2000 + n)
        for i, (ctx, module, data, total, sm) in enumerate(devices):
            struct.pack_into("<5Q", buf, base + 8 + i * d["used"], ctx, module, data, 7, total)
            struct.pack_into("<3Q", buf, base + d["util"] + i * d["util_stride"], 1, 2, sm)
        struct.pack_into("<i", buf, base + d["status"], status)
    struct.pack_into("<i", buf, d["procnum"], len(slots) if procnum is None else procnum)
    struct.pack_into("<i", buf, d["priority"], 1)
    if d["lkt"] is not None:
        struct.pack_into("<q", buf, d["lkt"], last_kernel)
    return buf


@pytest.mark.parametrize("version", [0, 1])
def test_device_use_is_summed_over_live_process_slots(version: int) -> None:
    buf = documented_file(
        version,
        [GPU0, GPU1],
        [3000 * MIB, 5000 * MIB],
        [
            (1, [(10, 20, 30, 100 * MIB, 15), (1, 2, 3, 10 * MIB, 5)]),
            (1, [(1, 2, 3, 50 * MIB, 10), (0, 0, 0, 0, 0)]),
        ],
        last_kernel=1_700_000_000,
    )
    region = parse_region(buf)
    assert region.version == version
    assert region.live_procs == 2
    gpu0, gpu1 = region.devices
    assert (gpu0.uuid, gpu0.index, gpu0.limit_bytes, gpu0.sm_limit) == (GPU0, 0, 3000 * MIB, 30)
    assert (gpu0.used_bytes, gpu0.context_bytes, gpu0.module_bytes, gpu0.buffer_bytes) == (
        150 * MIB,
        11,
        22,
        33,
    )
    assert gpu0.sm_util == 25
    assert (gpu1.uuid, gpu1.used_bytes, gpu1.limit_bytes, gpu1.sm_util) == (GPU1, 10 * MIB, 5000 * MIB, 5)
    assert region.last_kernel_time == (1_700_000_000 if version == 1 else 0)
    assert region.priority == 1


@pytest.mark.parametrize("version", [0, 1])
def test_dead_slots_and_slots_past_procnum_are_not_counted(version: int) -> None:
    buf = documented_file(
        version,
        [GPU0],
        [1000 * MIB],
        [
            (1, [(0, 0, 0, 100, 1)]),
            (0, [(0, 0, 0, 1000, 1)]),  # exited process, status cleared
            (1, [(0, 0, 0, 10_000, 1)]),  # beyond procnum below
        ],
        procnum=2,
    )
    region = parse_region(buf)
    assert region.devices[0].used_bytes == 100
    assert region.live_procs == 1


def test_device_slots_without_a_uuid_are_skipped() -> None:
    buf = documented_file(1, [GPU0, ""], [1, 2], [(1, [(0, 0, 0, 5, 0), (0, 0, 0, 6, 0)])])
    assert [d.uuid for d in parse_region(buf).devices] == [GPU0]


def test_uuid_label_is_the_first_40_bytes_like_hami() -> None:
    mig = "MIG-GPU-11111111-2222-3333-4444-555555555555/1/0"
    buf = documented_file(1, [mig], [1], [])
    assert parse_region(buf).devices[0].uuid == mig[:40]


def test_a_region_without_processes_reads_as_zero_use() -> None:
    region = parse_region(documented_file(1, [GPU0], [1000 * MIB], []))
    assert region.devices[0].used_bytes == 0
    assert region.live_procs == 0


def test_negative_or_huge_procnum_is_clamped() -> None:
    assert parse_region(documented_file(1, [GPU0], [1], [(1, [(0, 0, 0, 9, 0)])], procnum=-5)).live_procs == 0
    assert (
        parse_region(documented_file(1, [GPU0], [1], [(1, [(0, 0, 0, 9, 0)])], procnum=10**6)).live_procs == 1
    )


def test_larger_files_are_read_with_the_layout_their_version_names() -> None:
    buf = documented_file(1, [GPU0], [1], [(1, [(0, 0, 0, 9, 0)])]) + bytes(4096)
    assert parse_region(buf).devices[0].used_bytes == 9


def test_memoryview_and_bytes_decode_alike() -> None:
    buf = documented_file(0, [GPU0], [1], [(1, [(0, 0, 0, 9, 0)])])
    assert parse_region(memoryview(buf)) == parse_region(bytes(buf))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", DefectReason.TRUNCATED),
        (struct.pack("<i", 19920718), DefectReason.TRUNCATED),
        (bytes(DOC[1]["size"]), DefectReason.BAD_MAGIC),
        (b"\x7fELF" + bytes(4_000_000), DefectReason.BAD_MAGIC),
        (documented_file(0, [GPU0], [1], [])[:1_000_000], DefectReason.TRUNCATED),
        (documented_file(1, [GPU0], [1], [])[:100_000], DefectReason.TRUNCATED),
    ],
    ids=["empty", "header-only", "zeros", "foreign", "truncated-v0", "truncated-v1"],
)
def test_unreadable_files_raise_region_error_with_a_reason(data: bytes, reason: DefectReason) -> None:
    with pytest.raises(RegionError) as info:
        parse_region(data)
    assert info.value.reason == reason


def test_an_unknown_major_version_is_refused() -> None:
    buf = documented_file(1, [GPU0], [1], [])
    struct.pack_into("<i", buf, 4, 2)
    with pytest.raises(RegionError) as info:
        parse_region(buf)
    assert info.value.reason == DefectReason.UNKNOWN_VERSION


def test_more_devices_than_slots_is_refused() -> None:
    buf = documented_file(1, [GPU0], [1], [])
    struct.pack_into("<Q", buf, 56, 17)
    with pytest.raises(RegionError) as info:
        parse_region(buf)
    assert info.value.reason == DefectReason.BAD_DEVICE_COUNT


def test_a_non_ascii_uuid_is_refused() -> None:
    buf = documented_file(1, [GPU0], [1], [])
    buf[64:68] = b"\xff\xfe\x01\x02"
    with pytest.raises(RegionError) as info:
        parse_region(buf)
    assert info.value.reason == DefectReason.BAD_UUID


@pytest.mark.parametrize("version", [0, 1])
def test_in_repo_writer_matches_the_documented_offsets(version: int) -> None:
    image = RegionImage(
        version=version,
        minor=2,
        devices=(
            RegionDevice(uuid=GPU0, limit_bytes=3000 * MIB, sm_limit=30),
            RegionDevice(uuid=GPU1, limit_bytes=5000 * MIB, sm_limit=30),
        ),
        procs=(
            Proc(
                pid=1000,
                hostpid=2000,
                devices=(
                    SlotDevice(context=10, module=20, buffer=30, total=100 * MIB, sm_util=15),
                    SlotDevice(context=1, module=2, buffer=3, total=10 * MIB, sm_util=5),
                ),
            ),
        ),
        last_kernel_time=1_700_000_000,
    )
    written = build_region(image)
    documented = documented_file(
        version,
        [GPU0, GPU1],
        [3000 * MIB, 5000 * MIB],
        [(1, [(10, 20, 30, 100 * MIB, 15), (1, 2, 3, 10 * MIB, 5)])],
        last_kernel=1_700_000_000,
    )
    assert len(written) == len(documented)
    assert parse_region(written) == parse_region(documented)
    d = DOC[version]
    assert struct.unpack_from("<Q", written, d["procs"] + 8 + 32)[0] == 100 * MIB
    assert struct.unpack_from("<Q", written, d["procs"] + d["util"] + d["util_stride"] + 16)[0] == 5
    assert struct.unpack_from("<i", written, d["procs"] + d["status"])[0] == 1
