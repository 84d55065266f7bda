"""The Allocate core: HAMi-core env vars and mounts, preferred replicas, and pod matching.

Cases: one and several devices; scaling, core policy, license, GDRCOPY/GDS/MOFED switches;
the versioned libvgpu.so and license found on the host at start; the cache directory path and
its bad inputs; decisions from the bus that cannot be served (and why); preferred replicas
with and without must-include; matching by device count, ambiguity refused (never guessed),
refusals with operator messages, re-delivered and released decisions, completion.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from services.node_agent.allocate import (
    AllocateConfig,
    Mount,
    build_container_response,
    cache_dir,
    preferred_replicas,
)
from services.node_agent.errors import (
    AmbiguousDecision,
    BadAllocateRequest,
    DecisionMismatch,
    NoDecision,
)
from services.node_agent.handoff import allocate_config
from services.node_agent.pending import NO_DECISION, PendingTable, decision_problem
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.verify import VerifyQueue
from shared.errors import clip
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodUID,
)

A = DeviceUUID("GPU-aaaaaaaa-0000-0000-0000-000000000001")
B = DeviceUUID("GPU-bbbbbbbb-0000-0000-0000-000000000002")


def dev(uuid: DeviceUUID, mem: int = 3000, cores: int = 30) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, usedmem=mem, usedcores=cores)


def allocation(
    uid: str,
    *slots: tuple[ContainerDevice, ...],
    node: str = "n1",
    name: str | None = None,
    state: AllocationState = AllocationState.DECIDED,
    decided_at: float = 0.0,
) -> Allocation:
    return Allocation(
        pod_uid=PodUID(uid),
        namespace="ns",
        name=name or uid,
        node=NodeName(node),
        devices=slots,
        containers=tuple(f"c{i}" for i in range(len(slots))),
        state=state,
        decided_at=decided_at,
    )


# -- response builder ------------------------------------------------------------------------------


def test_one_device_gets_hami_core_env_and_mounts() -> None:
    r = build_container_response(
        [dev(A)], AllocateConfig(), pod_uid="uid-1", container="main", cache_id="c-1"
    )
    assert r.envs == {
        "NVIDIA_VISIBLE_DEVICES": A,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/c-1.cache",
        "LIBCUDA_LOG_LEVEL": "1",
    }
    assert r.mounts == (
        Mount(
            container_path="/usr/local/vgpu/libvgpu.so",
            host_path="/usr/local/vgpu/libvgpu.so",
            read_only=True,
        ),
        Mount(
            container_path="/usr/local/vgpu",
            host_path="/usr/local/vgpu/containers/uid-1_main",
            read_only=False,
        ),
        Mount(container_path="/tmp/vgpulock", host_path="/tmp/vgpulock", read_only=False),
        Mount(container_path="/etc/ld.so.preload", host_path="/usr/local/vgpu/ld.so.preload", read_only=True),
    )


def test_each_device_gets_its_own_memory_limit_and_sm_limit_comes_from_the_first() -> None:
    r = build_container_response(
        [dev(A, 1000, 20), dev(B, 2000, 50)], AllocateConfig(), pod_uid="u", container="c", cache_id="x"
    )
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == f"{A},{B}"
    assert (r.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], r.envs["CUDA_DEVICE_MEMORY_LIMIT_1"]) == ("1000m", "2000m")
    assert r.envs["CUDA_DEVICE_SM_LIMIT"] == "20"


@pytest.mark.parametrize(
    ("config", "key", "value"),
    [
        (AllocateConfig(memory_scaling=1.5), "CUDA_OVERSUBSCRIBE", "true"),
        (AllocateConfig(memory_scaling=1.0), "CUDA_OVERSUBSCRIBE", None),
        (AllocateConfig(disable_core_limit=True), "GPU_CORE_UTILIZATION_POLICY", "disable"),
        (AllocateConfig(core_policy="force"), "GPU_CORE_UTILIZATION_POLICY", "force"),
        (AllocateConfig(core_policy="default"), "GPU_CORE_UTILIZATION_POLICY", None),
        (
            AllocateConfig(disable_core_limit=True, core_policy="force"),
            "GPU_CORE_UTILIZATION_POLICY",
            "disable",
        ),
        (AllocateConfig(lib_cuda_log_level=4), "LIBCUDA_LOG_LEVEL", "4"),
        (AllocateConfig(hook_path="/opt/hami"), "CUDA_DEVICE_MEMORY_SHARED_CACHE", "/opt/hami/vgpu/x.cache"),
    ],
)
def test_node_settings_shape_the_env(config: AllocateConfig, key: str, value: str | None) -> None:
    r = build_container_response([dev(A)], config, pod_uid="u", container="c", cache_id="x")
    assert r.envs.get(key) == value


def test_license_adds_its_mounts_and_disable_control_drops_preload() -> None:
    r = build_container_response(
        [dev(A)],
        AllocateConfig(license_present=True),
        pod_uid="u",
        container="c",
        cache_id="x",
        disable_control=True,
    )
    paths = [m.container_path for m in r.mounts]
    assert "/etc/ld.so.preload" not in paths
    assert paths[-2:] == ["/tmp/license", "/usr/bin/vgpuvalidator"]


def test_gdrcopy_gds_and_mofed_flags_are_passed_as_hami_does() -> None:
    config = AllocateConfig(gdrcopy=True, gds=True, mofed=True)
    envs = build_container_response([dev(A)], config, pod_uid="u", container="c", cache_id="x").envs
    assert (envs["NVIDIA_GDRCOPY"], envs["NVIDIA_GDS"], envs["NVIDIA_MOFED"]) == ("enabled",) * 3
    plain = build_container_response([dev(A)], AllocateConfig(), pod_uid="u", container="c", cache_id="x")
    assert not {"NVIDIA_GDRCOPY", "NVIDIA_GDS", "NVIDIA_MOFED"} & set(plain.envs)


def _libvgpu_mount(config: AllocateConfig) -> str:
    r = build_container_response([dev(A)], config, pod_uid="u", container="c", cache_id="x")
    return next(m.host_path for m in r.mounts if m.container_path.endswith("/vgpu/libvgpu.so"))


def test_versioned_libvgpu_is_mounted_when_the_host_has_it(tmp_path: Path) -> None:
    vgpu = tmp_path / "vgpu"
    vgpu.mkdir()
    settings = NodeAgentSettings(node_name="n", hook_path=str(tmp_path), libvgpu_version="2.8.0")
    assert _libvgpu_mount(allocate_config(settings)) == f"{vgpu}/libvgpu.so"
    (vgpu / "libvgpu.so.2.8.0").write_bytes(b"")
    assert _libvgpu_mount(allocate_config(settings)) == f"{vgpu}/libvgpu.so.2.8.0"
    unversioned = dataclasses.replace(settings, libvgpu_version="")
    assert _libvgpu_mount(allocate_config(unversioned)) == f"{vgpu}/libvgpu.so"


def test_license_file_on_the_host_and_hami_flags_reach_the_config(tmp_path: Path) -> None:
    settings = NodeAgentSettings(node_name="n", hook_path=str(tmp_path), gds_enabled=True)
    assert not allocate_config(settings).license_present
    (tmp_path / "vgpu").mkdir()
    (tmp_path / "vgpu" / "license").write_text("k")
    config = allocate_config(settings)
    assert config.license_present and config.gds and not (config.gdrcopy or config.mofed)


@pytest.mark.parametrize(("uid", "ctr"), [("", "c"), ("u", ""), ("../x", "c"), ("u", ".."), ("u", "a/b")])
def test_cache_dir_refuses_names_that_escape_the_hook_path(uid: str, ctr: str) -> None:
    with pytest.raises(BadAllocateRequest):
        cache_dir("/usr/local", uid, ctr)


def test_no_devices_is_bad_input() -> None:
    with pytest.raises(BadAllocateRequest, match="no decided devices"):
        build_container_response([], AllocateConfig(), pod_uid="u", container="c", cache_id="x")


# -- preferred replicas -------------------------------------------------------------------------------

UUID_OF = {f"{u}-{i}": u for u in (A, B) for i in range(3)}


def test_preferred_picks_one_replica_of_each_decided_gpu() -> None:
    available = [f"{A}-0", f"{A}-1", f"{B}-0", f"{B}-1"]
    assert preferred_replicas([B], available, [], 1, UUID_OF) == (f"{B}-0",)
    assert preferred_replicas([A, B], available, [], 2, UUID_OF) == (f"{A}-0", f"{B}-0")


def test_preferred_honours_must_include_first() -> None:
    assert preferred_replicas([A, B], [f"{A}-0", f"{B}-2"], [f"{A}-1"], 2, UUID_OF) == (f"{A}-1", f"{B}-2")


def test_preferred_returns_fewer_when_the_decided_gpu_has_no_free_replica() -> None:
    assert preferred_replicas([B], [f"{A}-0"], [], 1, UUID_OF) == ()


# -- matching ---------------------------------------------------------------------------------------


def test_a_call_matches_the_pod_waiting_for_that_many_devices() -> None:
    table = PendingTable("n1")
    table.add(allocation("one", (dev(A),)))
    table.add(allocation("two", (dev(A), dev(B))))
    assert table.choose(2).allocation.pod_uid == "two"
    assert table.choose(1).allocation.pod_uid == "one"


def test_containers_are_matched_in_slot_order_and_the_last_completes_the_pod() -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),), (), (dev(B, 500),)))
    first = table.choose(1)
    assert (first.container, first.devices[0].uuid) == ("c0", A)
    assert table.mark(first, ["x-0"]) is None
    second = table.choose(1)
    assert (second.container, second.devices[0].uuid) == ("c2", B)
    done = table.mark(second, ["x-1"])
    assert done is not None and done.answered == {0: ("x-0",), 2: ("x-1",)}
    assert len(table) == 0


def test_no_pending_decision_says_so() -> None:
    with pytest.raises(NoDecision, match=NO_DECISION):
        PendingTable("n1").choose(1)


def test_count_mismatch_names_the_pod() -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),), name="web"))
    with pytest.raises(DecisionMismatch, match="device count 2 does not match the decision 1 for pod ns/web"):
        table.choose(2)


def test_count_matching_no_pod_lists_what_each_pod_wants() -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),)))
    table.add(allocation("q", (dev(A), dev(B))))
    with pytest.raises(DecisionMismatch, match=r"ns/p wants 1, ns/q wants 2"):
        table.choose(3)


def test_two_pods_of_the_same_size_are_refused_rather_than_guessed() -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),)))
    table.add(allocation("q", (dev(B),)))
    with pytest.raises(AmbiguousDecision, match="pods ns/p, ns/q"):
        table.choose(1)


def test_decisions_for_other_nodes_or_not_decided_are_ignored() -> None:
    table = PendingTable("n1")
    assert not table.add(allocation("p", (dev(A),), node="n2"))
    assert not table.add(allocation("q", (dev(A),), state=AllocationState.APPLIED))
    assert not table.add(allocation("r", ()))
    assert len(table) == 0


def test_a_released_decision_never_comes_back() -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),), decided_at=100.0))
    assert table.release(PodUID("p"), upto=105.0) is not None
    assert not table.add(allocation("p", (dev(A),), decided_at=100.0))
    with pytest.raises(NoDecision):
        table.choose(1)


def test_a_decision_released_before_it_arrived_is_ignored_when_it_does() -> None:
    table = PendingTable("n1")
    assert table.release(PodUID("p"), upto=105.0) is None
    assert not table.add(allocation("p", (dev(A),), decided_at=100.0))


@pytest.mark.parametrize("garbled", [math.nan, math.inf])
def test_a_release_with_a_garbled_time_still_lets_a_later_decision_count(garbled: float) -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),), decided_at=100.0))
    table.release(PodUID("p"), upto=garbled)
    assert not table.add(allocation("p", (dev(A),), decided_at=100.0))  # the old copy: still ignored
    assert table.add(allocation("p", (dev(B),), decided_at=101.0))


def test_a_retried_bind_after_a_release_brings_a_decision_that_counts() -> None:
    # The scheduler's bind failed after deciding (undone with a release), then kube-scheduler
    # retried it: the same pod's newer decision must be served, not taken for the old one.
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),), decided_at=100.0))
    table.release(PodUID("p"), upto=102.0)
    assert table.add(allocation("p", (dev(B),), decided_at=103.0))
    assert table.choose(1).allocation.devices == ((dev(B),),)


def test_a_redelivered_identical_decision_keeps_progress() -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),), (dev(B),)))
    table.mark(table.choose(1), ["x"])
    table.add(allocation("p", (dev(A),), (dev(B),)))
    assert table.choose(1).container == "c1"


def test_reconcile_marks_containers_the_kubelet_already_holds() -> None:
    table = PendingTable("n1")
    table.add(allocation("p", (dev(A),), (dev(B),)))
    assert table.mark_containers(PodUID("p"), ["c0"]) is None
    assert table.choose(1).container == "c1"
    assert table.mark_containers(PodUID("p"), ["c1"]) is not None
    assert len(table) == 0


# -- decisions that cannot be served -----------------------------------------------------------------

GPUS = {g: DeviceInfo(id=g, type="NVIDIA-A100", devmem=81920) for g in (A, B)}


def _broken(**changes: object) -> Allocation:
    return dataclasses.replace(allocation("p", (dev(A),), (dev(B),)), **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("decision", "reason"),
    [
        (_broken(containers=("c0",)), "1 container names for 2 device slots"),
        (_broken(containers=("c0", "c0")), "empty, repeated or not path-safe"),
        (_broken(containers=("c0", "../etc")), "empty, repeated or not path-safe"),
        (_broken(pod_uid=PodUID("..")), "pod UID '..' is not path-safe"),
        (allocation("p", (dev(DeviceUUID("GPU-elsewhere")),)), "GPU 'GPU-elsewhere' is not advertised"),
        (allocation("p", (dev(A, mem=-1),)), "out of range"),
        (allocation("p", (dev(A, cores=101),)), "out of range"),
    ],
)
def test_decisions_that_cannot_be_served_say_why(decision: Allocation, reason: str) -> None:
    problem = decision_problem(decision, GPUS)
    assert problem is not None and reason in problem


def test_a_sound_decision_has_no_problem_even_with_a_gpu_less_container_named_like_another() -> None:
    decision = dataclasses.replace(allocation("p", (), (dev(A, cores=0),)), containers=("c1", "c1"))
    assert decision_problem(decision, GPUS) is None


def test_outside_input_is_clipped_in_messages() -> None:
    assert clip("x" * 10) == "x" * 10
    assert clip("x" * 1000).endswith("...(1000 chars)") and len(clip("x" * 1000)) < 140


# -- verification schedule: batched checks against the kubelet's pod resources ---------------------
def test_checks_due_together_are_taken_in_one_batch_and_later_ones_wait() -> None:
    queue = VerifyQueue(first_delay_s=0.5, attempts=3)
    first, second, late = (allocation(uid=u) for u in ("a", "b", "c"))
    queue.add(first, now=0.0)
    queue.add(second, now=0.2)
    queue.add(late, now=2.0)
    assert queue.next_due() == 0.5
    batch = queue.take_due(now=0.5, window_s=0.25)
    assert [c.allocation.pod_uid for c in batch] == ["a", "b"]  # b is due at 0.7, within the window
    assert queue.next_due() == 2.5


def test_an_unlisted_pod_is_retried_with_doubling_delays_until_attempts_run_out() -> None:
    queue = VerifyQueue(first_delay_s=0.5, attempts=3)
    queue.add(allocation(uid="a"), now=0.0)
    (check,) = queue.take_due(now=0.5, window_s=0.0)
    assert queue.retry(check, now=0.5)
    assert queue.next_due() == 1.5
    (check,) = queue.take_due(now=1.5, window_s=0.0)
    assert queue.retry(check, now=1.5)
    assert queue.next_due() == 3.5
    (check,) = queue.take_due(now=3.5, window_s=0.0)
    assert not queue.retry(check, now=3.5)
    assert len(queue) == 0
