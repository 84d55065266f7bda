"""Usage sources: HAMi-core cache files on disk, NVML (a fake port + fake /proc), the simulator.

Case matrix (hami-core): {v0, v1} files read; {no hook dir, empty container dir} read as nothing;
{bad dir name, two cache files, foreign file, truncated file, empty file} skipped with a reason
while the good files beside them are read; a file rewritten in place or replaced is re-read.
NVML: processes mapped to containers through cgroups; host/unknown-pod/ambiguous processes are
unattributed. Sim: deterministic, within the slice, overuse by pattern.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from monitor_builders import GPU0, GPU1, UID_A, UID_B, allocation

from services.monitor.cgroup import ProcCgroups
from services.monitor.errors import SourceUnavailable
from services.monitor.ledger import MIB, Ledger
from services.monitor.readings import DefectReason
from services.monitor.region_writer import (
    Proc,
    RegionDevice,
    RegionImage,
    SlotDevice,
    build_region,
    write_procs,
)
from services.monitor.sources.hamicore import HamiCoreSource
from services.monitor.sources.nvml import NvmlDevice, NvmlProcess, NvmlSource, device_type
from services.monitor.sources.sim import SimSource
from shared.model import AllocationState


def write_cache(root: Path, dirname: str, used: int, version: int = 1, limit: int = 1000 * MIB) -> Path:
    d = root / "containers" / dirname
    d.mkdir(parents=True, exist_ok=True)
    image = RegionImage(
        version=version,
        devices=(RegionDevice(uuid=GPU0, limit_bytes=limit),),
        procs=(Proc(devices=(SlotDevice(total=used, sm_util=20),)),),
    )
    path = d / "abcd.cache"
    path.write_bytes(build_region(image))
    return path


# -- hami-core -------------------------------------------------------------------------------


def test_hami_core_reads_every_container_directory_in_both_layouts(tmp_path: Path) -> None:
    write_cache(tmp_path, f"{UID_A}_main", 100 * MIB, version=1)
    write_cache(tmp_path, f"{UID_B}_worker", 200 * MIB, version=0)
    source = HamiCoreSource(tmp_path)
    reading = source.collect(Ledger("n1"), 0.0)
    got = {(c.pod_uid, c.container): c.devices[0].used_bytes for c in reading.containers}
    assert got == {(UID_A, "main"): 100 * MIB, (UID_B, "worker"): 200 * MIB}
    assert reading.defects == ()
    first = reading.containers[0].devices[0]
    assert (first.uuid, first.limit_bytes, first.sm_util) == (GPU0, 1000 * MIB, 20.0)
    source.close()


def test_hami_core_without_a_containers_directory_reads_nothing(tmp_path: Path) -> None:
    reading = HamiCoreSource(tmp_path / "absent").collect(Ledger("n1"), 0.0)
    assert reading.containers == () and reading.defects == ()


def test_a_container_that_has_not_started_cuda_has_no_reading(tmp_path: Path) -> None:
    (tmp_path / "containers" / f"{UID_A}_main").mkdir(parents=True)
    (tmp_path / "containers" / f"{UID_A}_main" / "libvgpu.so").write_bytes(b"\x7fELF")
    reading = HamiCoreSource(tmp_path).collect(Ledger("n1"), 0.0)
    assert reading.containers == () and reading.defects == ()


def test_bad_files_are_skipped_with_reasons_and_good_ones_still_read(tmp_path: Path) -> None:
    write_cache(tmp_path, f"{UID_A}_main", 100 * MIB)
    containers = tmp_path / "containers"
    (containers / "no-underscore").mkdir()
    (containers / f"{UID_B}_two").mkdir()
    (containers / f"{UID_B}_two" / "a.cache").write_bytes(b"x")
    (containers / f"{UID_B}_two" / "b.cache").write_bytes(b"x")
    (containers / f"{UID_B}_foreign").mkdir()
    (containers / f"{UID_B}_foreign" / "x.cache").write_bytes(b"\x7fELF" + bytes(2_100_000))
    (containers / f"{UID_B}_short").mkdir()
    (containers / f"{UID_B}_short" / "x.cache").write_bytes(build_region(RegionImage())[:500_000])
    (containers / f"{UID_B}_empty").mkdir()
    (containers / f"{UID_B}_empty" / "x.cache").write_bytes(b"")
    reading = HamiCoreSource(tmp_path).collect(Ledger("n1"), 0.0)
    assert [(c.pod_uid, c.container) for c in reading.containers] == [(UID_A, "main")]
    reasons = {Path(d.where).name: d.reason for d in reading.defects}
    assert reasons == {
        "no-underscore": DefectReason.BAD_DIR_NAME,
        f"{UID_B}_two": DefectReason.TOO_MANY_FILES,
        f"{UID_B}_foreign": DefectReason.BAD_MAGIC,
        f"{UID_B}_short": DefectReason.TRUNCATED,
        f"{UID_B}_empty": DefectReason.TRUNCATED,
    }


def test_updates_in_place_and_replaced_files_are_seen_next_cycle(tmp_path: Path) -> None:
    path = write_cache(tmp_path, f"{UID_A}_main", 100 * MIB)
    source = HamiCoreSource(tmp_path)
    assert source.collect(Ledger("n1"), 0.0).containers[0].devices[0].used_bytes == 100 * MIB
    with open(path, "r+b") as f:  # HAMi-core writes through its own shared mapping
        buf = bytearray(f.read())
        write_procs(buf, 1, [Proc(devices=(SlotDevice(total=300 * MIB),))])
        f.seek(0)
        f.write(buf)
    assert source.collect(Ledger("n1"), 1.0).containers[0].devices[0].used_bytes == 300 * MIB
    replacement = path.with_name("new.cache")
    replacement.write_bytes(path.read_bytes())
    os.replace(replacement, path)  # a new inode: must be re-mapped, not read through the old map
    write_cache(tmp_path, f"{UID_A}_main", 50 * MIB)
    assert source.collect(Ledger("n1"), 2.0).containers[0].devices[0].used_bytes == 50 * MIB
    source.close()


def test_unlistable_hook_path_fails_the_source(tmp_path: Path) -> None:
    (tmp_path / "containers").write_text("not a directory")
    with pytest.raises(SourceUnavailable):
        HamiCoreSource(tmp_path).collect(Ledger("n1"), 0.0)


# -- nvml ------------------------------------------------------------------------------------


class FakeNvml:
    """An in-memory NVML at our port: devices, per-device processes and SM samples."""

    def __init__(
        self,
        devices: list[NvmlDevice],
        procs: dict[int, list[NvmlProcess]],
        util: dict[int, dict[int, int]] | None = None,
    ) -> None:
        self._devices = devices
        self._procs = procs
        self._util = util or {}
        self.fail = False
        self.closed = False

    def devices(self) -> Sequence[NvmlDevice]:
        if self.fail:
            raise SourceUnavailable("NVML gone")
        return self._devices

    def processes(self, index: int) -> Sequence[NvmlProcess]:
        return self._procs.get(index, [])

    def process_utilization(self, index: int, since_us: int) -> dict[int, int]:
        return self._util.get(index, {})

    def close(self) -> None:
        self.closed = True


def fake_proc(root: Path, pid: int, pod_uid: str | None) -> None:
    (root / str(pid)).mkdir(parents=True)
    text = (
        "0::/system.slice/Xorg.service\n"
        if pod_uid is None
        else f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod_uid.replace('-', '_')}"
        f".slice/cri-containerd-{'ab' * 32}.scope\n"
    )
    (root / str(pid) / "cgroup").write_text(text)


def test_nvml_processes_are_attributed_to_ledger_containers(tmp_path: Path) -> None:
    ledger = Ledger("n1")
    ledger.apply(allocation(UID_A, "train", [[(GPU0, 1000, 30), (GPU1, 2000, 30)]]))
    ledger.apply(allocation(UID_B, "pair", [[(GPU0, 500, 10)], [(GPU0, 500, 10)]], containers=("a", "b")))
    for pid, uid in ((10, UID_A), (11, UID_A), (12, UID_B), (13, None)):
        fake_proc(tmp_path, pid, uid)
    nvml = FakeNvml(
        [
            NvmlDevice(
                index=0, uuid=GPU0, name="A100-SXM4-80GB", memory_used=5 * MIB, gpu_util=40, memory_util=7
            ),
            NvmlDevice(index=1, uuid=GPU1, name="NVIDIA H200", memory_used=7 * MIB),
        ],
        {
            0: [
                NvmlProcess(pid=10, used_bytes=100),
                NvmlProcess(pid=11, used_bytes=50),
                NvmlProcess(pid=12, used_bytes=1),
                NvmlProcess(pid=13, used_bytes=1),
                NvmlProcess(pid=99, used_bytes=1),
            ],
            1: [NvmlProcess(pid=10, used_bytes=300)],
        },
        {0: {10: 20, 11: 5}},
    )
    reading = NvmlSource(nvml, ProcCgroups(tmp_path)).collect(ledger, 100.0)
    assert [(c.pod_uid, c.container) for c in reading.containers] == [(UID_A, "main")]
    devs = {d.uuid: (d.vindex, d.used_bytes, d.sm_util) for d in reading.containers[0].devices}
    assert devs == {GPU0: (0, 150, 25.0), GPU1: (1, 300, 0.0)}
    # pid 12: its pod's two containers share GPU0 (ambiguous); 13: a host process; 99: already gone
    assert reading.unattributed == 3
    assert [(h.index, h.type, h.used_bytes, h.gpu_util) for h in reading.host] == [
        (0, "NVIDIA-A100-SXM4-80GB", 5 * MIB, 40.0),
        (1, "NVIDIA H200", 7 * MIB, 0.0),
    ]


def test_device_type_is_prefixed_like_hami() -> None:
    assert device_type("Tesla T4") == "NVIDIA-Tesla T4"
    assert device_type("NVIDIA A100") == "NVIDIA A100"


def test_nvml_failure_propagates_as_source_unavailable(tmp_path: Path) -> None:
    nvml = FakeNvml([], {})
    nvml.fail = True
    source = NvmlSource(nvml, ProcCgroups(tmp_path))
    with pytest.raises(SourceUnavailable):
        source.collect(Ledger("n1"), 0.0)
    source.close()
    assert nvml.closed


# -- sim -------------------------------------------------------------------------------------


def sim_ledger() -> Ledger:
    ledger = Ledger("n1")
    ledger.apply(allocation(UID_A, "train", [[(GPU0, 1000, 30)]]))
    ledger.apply(allocation(UID_B, "hog", [[(GPU0, 2000, 50), (GPU1, 2000, 50)]]))
    ledger.apply(allocation("c" + UID_A[1:], "pending", [[(GPU1, 100, 0)]], state=AllocationState.RESERVED))
    return ledger


def test_sim_usage_stays_within_the_slice_and_is_deterministic() -> None:
    ledger = sim_ledger()
    first = SimSource().collect(ledger, 1000.0)
    assert first == SimSource().collect(ledger, 1000.0)
    assert {c.pod_uid for c in first.containers} == {UID_A, UID_B}  # reserved pods do not run yet
    for c in first.containers:
        for d in c.devices:
            assert 0 < d.used_bytes <= d.limit_bytes
            assert d.context_bytes + d.module_bytes + d.buffer_bytes == d.used_bytes
            assert 0 < d.sm_util <= 100
    host = {h.uuid: h.used_bytes for h in first.host}
    assert host[GPU0] == sum(d.used_bytes for c in first.containers for d in c.devices if d.uuid == GPU0)


def test_sim_overuse_pattern_makes_a_pod_exceed_its_limit() -> None:
    ledger = sim_ledger()
    source = SimSource(overuse=["team/ho*"])
    over = {c.pod_uid: c for c in source.collect(ledger, 5.0).containers}
    assert all(d.used_bytes > d.limit_bytes for d in over[UID_B].devices)
    assert all(d.used_bytes <= d.limit_bytes for d in over[UID_A].devices)
    source.set_overuse([])
    calm = {c.pod_uid: c for c in source.collect(ledger, 5.0).containers}
    assert all(d.used_bytes <= d.limit_bytes for d in calm[UID_B].devices)
