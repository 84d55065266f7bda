"""Reading HAMi-core cache files the container owns: whatever it does to them, the monitor lives.

Case matrix: the file {shrinks and regrows while a real reader process reads it in a loop,
is a symlink to a valid region, is a FIFO} -> a counted defect, never a crash or a hang; the
decoder given ranges that came back short {head, tail, process slots} -> TRUNCATED, and a file
read in those ranges decodes like the whole buffer (v0, v1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from monitor_builders import GPU0, REPO, UID_A, UID_B

from services.monitor.errors import RegionError
from services.monitor.ledger import MIB, Ledger
from services.monitor.readings import DefectReason
from services.monitor.region import V0, V1, Layout, decode, parse_region, slot_count
from services.monitor.region_writer import Proc, RegionDevice, RegionImage, SlotDevice, build_region
from services.monitor.sources.hamicore import HamiCoreSource, RegionReader

#: Reads the hook directory in a loop, as the monitor's collect task does, and reports what it saw.
READER = """
import collections, json, sys
from pathlib import Path
from services.monitor.ledger import Ledger
from services.monitor.sources.hamicore import HamiCoreSource
source, ledger = HamiCoreSource(Path(sys.argv[1])), Ledger("n1")
read, reasons = 0, collections.Counter()
for _ in range(int(sys.argv[2])):
    reading = source.collect(ledger, 0.0)
    read += len(reading.containers)
    reasons.update(d.reason.value for d in reading.defects)
print(json.dumps({"read": read, "reasons": reasons}))
"""


def region_image(procs: int = 1, version: int = 1) -> bytearray:
    return build_region(
        RegionImage(
            version=version,
            devices=(RegionDevice(uuid=GPU0, limit_bytes=1000 * MIB),),
            procs=tuple(Proc(pid=p + 1, devices=(SlotDevice(total=MIB),)) for p in range(procs)),
        )
    )


def cache_dir(hook: Path, name: str) -> Path:
    d = hook / "containers" / name
    d.mkdir(parents=True)
    return d


def test_a_file_shrinking_while_read_is_truncated_never_a_crash(tmp_path: Path) -> None:
    image = bytes(region_image(procs=1024))  # 2 MB of slots: a long read, a wide window
    path = cache_dir(tmp_path, f"{UID_A}_main") / "x.cache"
    path.write_bytes(image)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(tmp_path), "400"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    fd = os.open(path, os.O_RDWR)
    try:
        while reader.poll() is None:  # what a container may do to its own file, as fast as it can
            os.ftruncate(fd, 12)
            os.ftruncate(fd, len(image))
            os.pwrite(fd, image, 0)
    finally:
        os.close(fd)
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0, f"the reader died (exit {reader.returncode}; -7 is SIGBUS)"
    seen = json.loads(out)
    assert seen["read"] + sum(seen["reasons"].values()) == 400  # every cycle: a reading or a defect
    assert set(seen["reasons"]) <= {DefectReason.TRUNCATED.value}


def test_a_symlinked_cache_file_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.cache"
    target.write_bytes(region_image())
    (cache_dir(tmp_path, f"{UID_A}_main") / "x.cache").symlink_to(target)
    (cache_dir(tmp_path, f"{UID_B}_main") / "x.cache").write_bytes(region_image())
    reading = HamiCoreSource(tmp_path).collect(Ledger("n1"), 0.0)
    assert [c.pod_uid for c in reading.containers] == [UID_B]
    assert [(Path(d.where).name, d.reason) for d in reading.defects] == [
        (f"{UID_A}_main", DefectReason.UNREADABLE)
    ]


@pytest.mark.timeout(20)
def test_a_fifo_named_like_a_cache_file_is_skipped_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(cache_dir(tmp_path, f"{UID_A}_main") / "x.cache")
    reading = HamiCoreSource(tmp_path).collect(Ledger("n1"), 0.0)
    assert reading.containers == ()
    assert [d.reason for d in reading.defects] == [DefectReason.UNREADABLE]


def ranges(buf: bytes, lay: Layout) -> tuple[bytes, bytes, bytes]:
    """The three ranges a reader fetches: head, tail, and the process slots [0, procnum)."""
    head, tail = buf[: lay.procs], buf[lay.procnum : lay.size]
    return head, tail, buf[lay.procs : lay.procs + slot_count(lay, head, tail) * lay.slot_size]


@pytest.mark.parametrize("lay", [V0, V1], ids=["v0", "v1"])
def test_a_file_read_in_ranges_decodes_like_the_whole_file(lay: Layout, tmp_path: Path) -> None:
    # the reader's own offsets and buffers (head, tail, live slots) against the whole-buffer decoder
    buf = bytes(region_image(procs=3, version=lay.version))
    path = tmp_path / "x.cache"
    path.write_bytes(buf)
    region = RegionReader().read(str(path))
    assert region == parse_region(buf) and region.live_procs == 3


@pytest.mark.parametrize("short", [0, 1, 2], ids=["head", "tail", "slots"])
def test_ranges_that_came_back_short_are_truncated(short: int) -> None:
    parts = list(ranges(bytes(region_image(procs=3)), V1))
    parts[short] = parts[short][:-1]
    with pytest.raises(RegionError) as e:
        decode(V1, *parts)
    assert e.value.reason == DefectReason.TRUNCATED
