"""The monitor's core: ledger, accounting, limit crossings, publishing cadence, cleanup.

Case matrix: ledger {decided, released, other node, rebuilt}; merge {first source wins, unknown
pod left out, ledger limit preferred over the source's}; crossing {once per crossing, re-arms
below the limit, several devices}; usage {rate-limited, chunked}; sources {failing, crashing,
defects counted}; impossible byte counts {a container's or host device's reading past 2**63-1,
a decided slice past it} -> counted, the rest still published (and encodable); cleanup {unknown
+ old removed, known kept, young kept, foreign names kept, not before the ledger is synced}.
"""

from __future__ import annotations

import os
from pathlib import Path

from monitor_builders import GPU0, GPU1, UID_A, UID_B, ScriptedSource, allocation, monitor_with

from services.monitor import accounting
from services.monitor.cleanup import CacheDir, stale_dirs
from services.monitor.errors import SourceUnavailable
from services.monitor.ledger import MIB
from services.monitor.monitor import Monitor, MonitorOptions
from services.monitor.readings import (
    ContainerReading,
    Defect,
    DefectReason,
    DeviceReading,
    HostReading,
    SourceReading,
)
from shared.codec import encode
from shared.events import AllocationDecided, AllocationReleased, Inventory, Usage, UsageOverLimit
from shared.model import DeviceInfo, DeviceUUID


def used(uid: str, container: str, *devs: tuple[str, int]) -> ContainerReading:
    return ContainerReading(
        pod_uid=uid,
        container=container,
        devices=tuple(
            DeviceReading(uuid=u, vindex=i, used_bytes=b, limit_bytes=999) for i, (u, b) in enumerate(devs)
        ),
    )


# -- ledger ----------------------------------------------------------------------------------


def test_ledger_follows_decisions_and_releases_of_its_node_only() -> None:
    m, _ = monitor_with()
    m.on_event(AllocationDecided(allocation=allocation("x" * 8, "other", [[(GPU0, 1, 1)]], node="n2")))
    assert "x" * 8 not in m.ledger
    m.on_event(AllocationReleased(pod_uid=UID_B, namespace="team", name="infer", why="deleted"))
    assert m.ledger.pod_uids() == {UID_A}
    assert m.ledger.limit_bytes(UID_A, "main", GPU1) == 1000 * MIB
    assert m.ledger.limit_bytes(UID_A, "main", "GPU-unknown") == 0


def test_inventory_of_the_node_labels_its_devices() -> None:
    m, _ = monitor_with()
    dev = DeviceInfo(id=DeviceUUID(GPU0), type="NVIDIA-A100", devmem=80_000)
    m.on_event(Inventory(node="n2", devices=(dev,)))
    assert m.ledger.devices == ()
    m.on_event(Inventory(node="n1", devices=(dev,)))
    assert m.ledger.devices == (dev,)


# -- accounting ------------------------------------------------------------------------------


def test_first_source_wins_a_container_and_unknown_pods_are_left_out() -> None:
    m, _ = monitor_with()
    first = SourceReading(containers=(used(UID_A, "main", (GPU0, 10)),))
    second = SourceReading(
        containers=(
            used(UID_A, "main", (GPU0, 99)),
            used(UID_B, "main", (GPU0, 5)),
            used("unknown-pod", "main", (GPU0, 1)),
        ),
        host=(HostReading(uuid=GPU0, index=0, type="NVIDIA-A100", used_bytes=7),),
    )
    view = accounting.merge("n1", 1.0, [("a", first), ("b", second)], m.ledger)
    got = {(c.pod, c.source): c.devices[0].used_bytes for c in view.containers}
    assert got == {("train", "a"): 10, ("infer", "b"): 5}
    assert view.unknown_containers == 1
    assert [h.used_bytes for h in view.host] == [7]


def test_limit_is_the_ledger_slice_with_the_source_figure_as_fallback() -> None:
    m, _ = monitor_with()
    reading = SourceReading(containers=(used(UID_A, "main", (GPU0, 10), ("GPU-not-in-ledger", 1)),))
    view = accounting.merge("n1", 1.0, [("a", reading)], m.ledger)
    assert [d.limit_bytes for d in view.containers[0].devices] == [1000 * MIB, 999]


# -- crossings -------------------------------------------------------------------------------


def test_over_limit_is_reported_once_per_crossing_and_re_arms_below_the_limit() -> None:
    source = ScriptedSource()
    m, sent = monitor_with(source)
    over = 1000 * MIB + 1
    for usage in (10, over, over + 5, 10, over):
        source.reading = SourceReading(containers=(used(UID_A, "main", (GPU0, usage), (GPU1, 1)),))
        m.cycle(now=0.0)
    crossings = [e for e in sent if isinstance(e, UsageOverLimit)]
    assert [(e.pod, e.container, e.uuid, e.used_bytes, e.limit_bytes) for e in crossings] == [
        ("train", "main", GPU0, over, 1000 * MIB),
        ("train", "main", GPU0, over, 1000 * MIB),
    ]
    assert m.stats.over_limit_events == 2
    assert m.view.over_limit() == {(UID_A, "main", GPU0)}


def test_each_device_of_a_container_crosses_on_its_own() -> None:
    source = ScriptedSource()
    m, sent = monitor_with(source)
    source.reading = SourceReading(containers=(used(UID_A, "main", (GPU0, 2000 * MIB), (GPU1, 2000 * MIB)),))
    m.cycle(now=0.0)
    assert sorted(e.uuid for e in sent if isinstance(e, UsageOverLimit)) == [GPU0, GPU1]


# -- publishing ------------------------------------------------------------------------------


def test_usage_is_published_at_most_once_per_publish_interval() -> None:
    source = ScriptedSource()
    source.reading = SourceReading(containers=(used(UID_A, "main", (GPU0, 10)),))
    m, sent = monitor_with(source, publish_interval_s=10.0)
    for now in (100.0, 101.0, 109.9, 110.0, 115.0):
        m.cycle(now=now)
    usages = [e for e in sent if isinstance(e, Usage)]
    assert [u.ts >= 0 for u in usages] == [True, True]
    sample = usages[0].containers[0]
    assert (sample.namespace, sample.pod, sample.pod_uid, sample.container) == (
        "team",
        "train",
        UID_A,
        "main",
    )
    assert (sample.devices[0].used_bytes, sample.devices[0].limit_bytes) == (10, 1000 * MIB)
    assert usages[0].node == "n1"


def test_large_nodes_split_usage_into_several_events() -> None:
    source = ScriptedSource()
    source.reading = SourceReading(
        containers=(used(UID_A, "main", (GPU0, 1)), used(UID_B, "main", (GPU0, 2))),
        host=(HostReading(uuid=GPU0, index=0, type="T", used_bytes=3),),
    )
    m, sent = monitor_with(source, max_containers=1)
    m.cycle(now=0.0)
    usages = [e for e in sent if isinstance(e, Usage)]
    assert [len(u.containers) for u in usages] == [1, 1]
    assert [len(u.host) for u in usages] == [1, 0]


# -- sources ---------------------------------------------------------------------------------


def test_a_failing_source_is_counted_and_the_others_still_report() -> None:
    broken, healthy = ScriptedSource("nvml"), ScriptedSource("hami-core")
    broken.error = SourceUnavailable("NVML gone")
    healthy.reading = SourceReading(containers=(used(UID_A, "main", (GPU0, 10)),))
    m, _ = monitor_with(broken, healthy)
    view = m.cycle(now=0.0)
    assert [c.source for c in view.containers] == ["hami-core"]
    assert m.stats.source_up == {"nvml": False, "hami-core": True}
    assert m.stats.source_failures["nvml"] == 1
    broken.error = None
    m.cycle(now=1.0)
    assert m.stats.source_up["nvml"] is True


def test_a_crashing_source_costs_one_cycle_not_the_monitor() -> None:
    source = ScriptedSource()
    source.error = ZeroDivisionError("bug")
    m, _ = monitor_with(source)
    m.cycle(now=0.0)
    assert m.stats.source_failures["scripted"] == 1


def test_skipped_files_are_counted_per_reason_every_cycle() -> None:
    source = ScriptedSource("hami-core")
    source.reading = SourceReading(
        defects=(
            Defect(where="/x/a", reason=DefectReason.BAD_MAGIC),
            Defect(where="/x/b", reason=DefectReason.TRUNCATED),
        )
    )
    m, _ = monitor_with(source)
    m.cycle(now=0.0)
    m.cycle(now=1.0)
    assert m.stats.decode_errors == {("hami-core", "bad_magic"): 2, ("hami-core", "truncated"): 2}


# -- impossible byte counts ------------------------------------------------------------------


def test_readings_past_int64_cost_their_container_and_host_device_only() -> None:
    source = ScriptedSource("hami-core")
    source.reading = SourceReading(
        containers=(
            used(UID_A, "main", (GPU0, 10), (GPU1, 2 * (2**64 - 1))),
            used(UID_B, "main", (GPU0, 20)),
        ),
        host=(
            HostReading(uuid=GPU0, index=0, type="NVIDIA-A100", used_bytes=2**64),
            HostReading(uuid=GPU1, index=1, type="NVIDIA-A100", used_bytes=30),
        ),
    )
    m, sent = monitor_with(source, publish_interval_s=0.0)
    view = m.cycle(now=0.0)
    assert [c.pod_uid for c in view.containers] == [UID_B]
    assert [h.uuid for h in view.host] == [GPU1]
    assert m.stats.decode_errors == {("hami-core", "out_of_range"): 2}
    (usage,) = [e for e in sent if isinstance(e, Usage)]
    assert [c.pod_uid for c in usage.containers] == [UID_B]
    assert encode(usage)


def test_a_slice_too_large_to_be_bytes_is_counted_and_the_sources_limit_is_used() -> None:
    source = ScriptedSource()
    huge = "2f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
    source.reading = SourceReading(
        containers=(used(huge, "main", (GPU1, 10)), used(UID_B, "main", (GPU0, 20)))
    )
    m, sent = monitor_with(source, publish_interval_s=0.0)
    m.on_event(AllocationDecided(allocation=allocation(huge, "huge", [[(GPU1, 2**45, 10)]]), node="n1"))
    view = m.cycle(now=0.0)
    assert {c.pod: c.devices[0].limit_bytes for c in view.containers} == {"huge": 999, "infer": 500 * MIB}
    assert m.ledger_bad_limits == 1
    (usage,) = [e for e in sent if isinstance(e, Usage)]
    assert encode(usage)


# -- cleanup ---------------------------------------------------------------------------------


def test_stale_dirs_are_unknown_pods_older_than_the_grace() -> None:
    dirs = [
        CacheDir(name=f"{UID_A}_main", mtime=0.0),  # known pod
        CacheDir(name=f"{UID_B}_main", mtime=0.0),  # gone, old
        CacheDir(name=f"{UID_B}_side", mtime=950.0),  # gone, but changed recently
        CacheDir(name="lost+found", mtime=0.0),
    ]  # not ours
    assert stale_dirs(dirs, frozenset({UID_A}), now=1000.0, grace_s=300.0) == [f"{UID_B}_main"]


def test_cleanup_removes_old_dirs_of_gone_pods_once_the_ledger_is_synced(tmp_path: Path) -> None:
    containers = tmp_path / "containers"
    for name in (f"{UID_A}_main", f"{UID_B}_main", "gone-pod_main"):
        (containers / name).mkdir(parents=True)
        (containers / name / "x.cache").write_bytes(b"")
        os.utime(containers / name, (0, 0))
    m = Monitor("n1", [], lambda e: None, MonitorOptions(containers_dir=containers, cleanup_grace_s=60.0))
    assert m.cleanup(now=1000.0).removed == ()  # ledger not synced yet: nothing is judged
    m.ledger.replace_all([allocation(UID_A, "train", [[(GPU0, 1, 1)]])])
    result = m.cleanup(now=1000.0)
    assert result.removed == (f"{UID_B}_main", "gone-pod_main")
    assert sorted(p.name for p in containers.iterdir()) == [f"{UID_A}_main"]
    assert m.stats.cache_dirs_removed == 2
