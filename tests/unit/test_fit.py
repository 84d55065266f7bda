"""The Fit engine as a specification (reference §3, §3c; contract items 6 and 9).

Matrix: each HAMi check and its reason name (health, cordon, type/mode, NUMA, UUID, slots, mutex,
quota, memory, cores, exclusive, compute units, MIG), the "N/M Reason" string (sorted, denominator =
devices passed in, AllocatedCardsInsufficientRequest, NodeInsufficientDevice), device choice per policy,
multi-card and multi-container pods, init containers, slot padding, topology-aware choice, node choice,
the shortcut agreeing with the full chain, and apply/release.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from services.scheduler.fit import (
    NodeState,
    Policies,
    Quota,
    apply,
    filter_nodes,
    fit_pod,
    release,
    type_matches,
)
from services.scheduler.reasons import Reason
from shared.errors import AnnotationError
from shared.model import (
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    NodeName,
    PodRequest,
    PodUID,
)


def dev(
    i: int,
    *,
    mem: int = 10000,
    type_: str = "NVIDIA-A100",
    health: bool = True,
    numa: int = 0,
    count: int = 10,
    core: int = 100,
    mode: str = "hami-core",
) -> DeviceInfo:
    return DeviceInfo(
        id=DeviceUUID(f"GPU-{i}"),
        index=i,
        type=type_,
        devmem=mem,
        health=health,
        numa=numa,
        count=count,
        devcore=core,
        mode=mode,
    )


def use(used: int = 0, mem: int = 0, cores: int = 0) -> DeviceUsage:
    return DeviceUsage(used=used, usedmem=mem, usedcores=cores)


def key(k: str) -> str:
    """``hami_io__device_cordon`` -> ``hami.io/device-cordon``."""
    prefix, rest = k.split("__")
    return prefix.replace("_", ".") + "/" + rest.replace("_", "-")


def node(
    devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage] = (), name: str = "n1", **annotations: str
) -> NodeState:
    return NodeState(
        name=NodeName(name),
        devices=tuple(devices),
        usage=tuple(usage),
        annotations={key(k): v for k, v in annotations.items()},
    )


def pod(
    *reqs: ContainerRequest | None, init: Sequence[ContainerRequest | None] = (), **annotations: str
) -> PodRequest:
    specs = [ContainerSpec(name=f"init{i}", init=True, request=r) for i, r in enumerate(init)]
    specs += [ContainerSpec(name=f"c{i}", request=r) for i, r in enumerate(reqs)]
    return PodRequest(
        namespace="ns",
        name="p",
        uid=PodUID("u"),
        containers=tuple(specs),
        annotations={key(k): v for k, v in annotations.items()},
    )


def req(nums: int = 1, mem: int = 0, pct: int = 101, cores: int = 0) -> ContainerRequest:
    return ContainerRequest(nums=nums, memreq=mem, mempercentagereq=pct, coresreq=cores)


def uuids(slot: Sequence[ContainerDevice]) -> list[str]:
    return [d.uuid for d in slot]


# --- one reason per check -----------------------------------------------------------------------

CASES = [
    ("unhealthy", node([dev(0, health=False)]), pod(req(mem=1)), "1/1 CardNotHealth"),
    (
        "cordoned",
        node([dev(0), dev(1)], hami_io__device_cordon="GPU-0, GPU-1"),
        pod(req(mem=1)),
        "2/2 CardCordoned",
    ),
    ("type_nouse", node([dev(0)]), pod(req(mem=1), nvidia_com__nouse_gputype="A100"), "1/1 CardTypeMismatch"),
    ("mode", node([dev(0)]), pod(req(mem=1), nvidia_com__vgpu_mode="mps"), "1/1 CardTypeMismatch"),
    ("uuid_use", node([dev(0)]), pod(req(mem=1), nvidia_com__use_gpuuuid="GPU-9"), "1/1 CardUuidMismatch"),
    (
        "uuid_nouse",
        node([dev(0)]),
        pod(req(mem=1), nvidia_com__nouse_gpuuuid=" GPU-0 "),
        "1/1 CardUuidMismatch",
    ),
    ("slots", node([dev(0, count=2)], [use(2, 10, 10)]), pod(req(mem=1)), "1/1 CardTimeSlicingExhausted"),
    (
        "mutex",
        node([dev(0)], [use(1, 10, 10)]),
        pod(req(mem=1), hami_io__gpu_scheduler_policy="mutex"),
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
    ("memory", node([dev(0)], [use(1, 9000, 0)]), pod(req(mem=2000)), "1/1 CardInsufficientMemory"),
    ("percentage", node([dev(0)], [use(1, 1, 0)]), pod(req(pct=100)), "1/1 CardInsufficientMemory"),
    ("cores", node([dev(0)], [use(1, 0, 80)]), pod(req(mem=1, cores=30)), "1/1 CardInsufficientCore"),
    (
        "exclusive",
        node([dev(0)], [use(1, 0, 0)]),
        pod(req(mem=1, cores=100)),
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
    ("compute", node([dev(0)], [use(1, 0, 100)]), pod(req(mem=1)), "1/1 CardComputeUnitsExhausted"),
    ("mig", node([dev(0, mode="mig")]), pod(req(mem=1)), "1/1 CardMigTopologyInfeasible"),
    ("too_few", node([dev(0)]), pod(req(nums=2, mem=1)), "NodeInsufficientDevice"),
    (
        "partial",
        node([dev(0), dev(1)], [use(), use(1, 9500, 0)]),
        pod(req(nums=2, mem=1000)),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
    ),
]


@pytest.mark.parametrize(("state", "p", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_check_reports_its_hami_reason(state: NodeState, p: PodRequest, reason: str) -> None:
    fit = fit_pod(state, p)
    assert not fit.fit
    assert fit.reason == reason
    result = filter_nodes([state], p)
    assert result.fits == () and result.best is None
    assert result.failed == {"n1": reason}


def test_checks_run_in_hami_order_first_failure_counts() -> None:
    # unhealthy AND cordoned AND full: only CardNotHealth counts for that device
    state = node(
        [dev(0, health=False, count=1), dev(1, count=1)], [use(1), use(1)], hami_io__device_cordon="GPU-0"
    )
    assert fit_pod(state, pod(req(mem=1))).reason == "1/2 CardNotHealth, 1/2 CardTimeSlicingExhausted"


def test_quota_is_checked_before_memory() -> None:
    state = node([dev(0)], [use(1, 9999, 0)])
    quota = Quota(memory_limit=1000, memory_used=500)
    assert fit_pod(state, pod(req(mem=600)), quota=quota).reason == "1/1 ResourceQuotaNotFit"
    assert fit_pod(node([dev(0)]), pod(req(mem=500)), quota=quota).fit


def test_quota_cores_and_factor() -> None:
    assert not fit_pod(node([dev(0)]), pod(req(mem=1, cores=50)), quota=Quota(cores_limit=40)).fit
    assert fit_pod(node([dev(0)]), pod(req(mem=2000)), quota=Quota(memory_limit=2, memory_factor=1024)).fit


def test_quota_counts_the_whole_pod() -> None:
    quota = Quota(memory_limit=1500)
    assert fit_pod(node([dev(0), dev(1)]), pod(req(mem=700), req(mem=700)), quota=quota).fit
    assert not fit_pod(node([dev(0), dev(1)]), pod(req(mem=800), req(mem=800)), quota=quota).fit


def test_reason_strings_sort_as_strings_with_numa() -> None:
    # numa-bind: the first card (numa 1) is taken, then numa 0 resets it -> NumaNotFit
    state = node([dev(0, numa=0), dev(1, numa=1)])
    fit = fit_pod(state, pod(req(nums=2, mem=1), nvidia_com__numa_bind="true"))
    assert fit.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 NumaNotFit"
    assert fit.reasons == {Reason.NUMA_NOT_FIT: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1}


def test_numa_bind_places_all_cards_on_one_numa_node() -> None:
    state = node([dev(0, numa=0), dev(1, numa=1), dev(2, numa=0), dev(3, numa=1)])
    fit = fit_pod(state, pod(req(nums=2, mem=1), nvidia_com__numa_bind="true"))
    assert fit.fit
    numas = {state.devices[d.idx].numa for d in fit.devices[0]}
    assert len(numas) == 1


#: HAMi v2.10 ``pkg/device/devices.go`` ``CheckUUID``: the use list and the nouse list both apply
#: (a card named in both is excluded); an empty or blank value is no constraint; members are trimmed.
UUID_LISTS = [
    ("", "", {0, 1, 2}),
    ("GPU-1", "", {1}),
    ("", "GPU-1", {0, 2}),
    ("GPU-0,GPU-1", "GPU-1", {0}),
    ("GPU-1", "GPU-1", set()),
    ("GPU-0, GPU-2 ", " GPU-2", {0}),
    ("  ", "GPU-0", {1, 2}),
    ("GPU-9", "", set()),
    ("GPU-0,,GPU-1", ",", {0, 1}),
]


@pytest.mark.parametrize(("use_list", "nouse_list", "eligible"), UUID_LISTS)
def test_use_and_nouse_uuid_lists_both_apply(use_list: str, nouse_list: str, eligible: set[int]) -> None:
    lists = {"nvidia_com__use_gpuuuid": use_list, "nvidia_com__nouse_gpuuuid": nouse_list}
    fits = {i for i in range(3) if fit_pod(node([dev(i)]), pod(req(mem=1), **lists)).fit}
    assert fits == eligible
    verdict = fit_pod(node([dev(0), dev(1), dev(2)]), pod(req(nums=3, mem=1), **lists))
    excluded = 3 - len(eligible)
    assert verdict.reasons.get(Reason.CARD_UUID_MISMATCH, 0) == excluded


@pytest.mark.parametrize(
    ("entry", "device_type", "match"),
    [
        ("A10", "NVIDIA-A10", True),
        ("A10", "NVIDIA-A100", False),
        ("a100", "NVIDIA A100-SXM4-80GB", True),
        ("Tesla V100", "NVIDIA-Tesla_V100-PCIE", True),
        ("V100-PCIE", "NVIDIA-Tesla V100-PCIE-32GB", True),
        ("T4", "NVIDIA-Tesla T4", True),
        ("Tesla", "NVIDIA-Tesla T4", True),
        ("", "NVIDIA-A10", False),
    ],
)
def test_type_matching_is_on_whole_tokens(entry: str, device_type: str, match: bool) -> None:
    assert type_matches(entry, device_type) is match


def test_use_gputype_a10_never_selects_a100() -> None:
    state = node([dev(0, type_="NVIDIA-A100"), dev(1, type_="NVIDIA-A10")])
    fit = fit_pod(state, pod(req(mem=1), nvidia_com__use_gputype="A10"))
    assert uuids(fit.devices[0]) == ["GPU-1"]
    fit = fit_pod(state, pod(req(nums=2, mem=1), nvidia_com__use_gputype=" , A10"))
    assert fit.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTypeMismatch"


def test_nouse_wins_over_use() -> None:
    state = node([dev(0, type_="NVIDIA-A10")])
    p = pod(req(mem=1), nvidia_com__use_gputype="A10", nvidia_com__nouse_gputype="a10")
    assert fit_pod(state, p).reason == "1/1 CardTypeMismatch"


def test_exclusive_request_skips_shared_gpu() -> None:
    state = node([dev(0), dev(1)], [use(1, 100, 10), use()])
    fit = fit_pod(state, pod(req(pct=100, cores=100)))
    assert uuids(fit.devices[0]) == ["GPU-1"]


def test_exclusive_only_on_cards_with_100_cores() -> None:
    state = node([dev(0, core=200)], [use(1, 0, 0)])
    assert fit_pod(state, pod(req(mem=1, cores=100))).fit


def test_cores_over_100_are_clamped() -> None:
    fit = fit_pod(node([dev(0)]), pod(req(mem=1, cores=250)))
    assert fit.devices[0][0].usedcores == 100


def test_percentage_is_of_registered_memory() -> None:
    fit = fit_pod(node([dev(0, mem=24000)]), pod(req(pct=25)))
    assert fit.devices[0][0].usedmem == 6000


def test_spread_takes_the_least_used_card() -> None:
    state = node([dev(0), dev(1), dev(2)], [use(1, 5000, 50), use(), use(1, 1000, 10)])
    assert uuids(fit_pod(state, pod(req(mem=100))).devices[0]) == ["GPU-1"]


def test_binpack_takes_the_fullest_card_that_fits() -> None:
    state = node([dev(0), dev(1), dev(2)], [use(1, 5000, 50), use(), use(1, 9900, 10)])
    p = pod(req(mem=1000), hami_io__gpu_scheduler_policy="binpack")
    assert uuids(fit_pod(state, p).devices[0]) == ["GPU-0"]


def test_spread_on_idle_node_takes_highest_index_first() -> None:
    # equal scores: index ascending, and Fit scans from the end (HAMi behaviour)
    assert uuids(fit_pod(node([dev(0), dev(1)]), pod(req(mem=1))).devices[0]) == ["GPU-1"]


def test_mutex_prefers_idle_cards_and_refuses_used_ones() -> None:
    state = node([dev(0), dev(1), dev(2)], [use(1, 1, 1), use(), use(2, 1, 1)])
    fit = fit_pod(state, pod(req(nums=1, mem=1), hami_io__gpu_scheduler_policy="mutex"))
    assert uuids(fit.devices[0]) == ["GPU-1"]


def test_multi_card_request_gets_distinct_cards() -> None:
    fit = fit_pod(node([dev(i) for i in range(4)]), pod(req(nums=3, mem=1)))
    assert len(set(uuids(fit.devices[0]))) == 3


def test_containers_share_a_card_and_see_earlier_usage() -> None:
    state = node([dev(0)])
    fit = fit_pod(state, pod(req(mem=6000), req(mem=4000)))
    assert fit.fit and [uuids(s) for s in fit.devices] == [["GPU-0"], ["GPU-0"]]
    assert fit_pod(state, pod(req(mem=6000), req(mem=4001))).reason == "1/1 CardInsufficientMemory"


def test_init_containers_use_fresh_copies_and_do_not_reduce_app_capacity() -> None:
    state = node([dev(0)])
    fit = fit_pod(state, pod(req(mem=9000), init=[req(mem=9000), req(mem=8000)]))
    assert fit.fit
    assert [len(s) for s in fit.devices] == [1, 1, 1]


def test_failed_init_container_fails_the_node() -> None:
    assert (
        fit_pod(node([dev(0)]), pod(req(mem=1), init=[req(mem=20000)])).reason == "1/1 CardInsufficientMemory"
    )


def test_slots_are_padded_for_gpu_container_not_first() -> None:
    fit = fit_pod(node([dev(0)]), pod(None, None, req(mem=10), init=[None]))
    assert [len(s) for s in fit.devices] == [0, 0, 0, 1]


def test_topology_aware_picks_best_connected_pair() -> None:
    scores = (
        '[{"uuid":"GPU-0","score":{"GPU-1":10,"GPU-2":100}},{"uuid":"GPU-1","score":{"GPU-2":20}},'
        '{"uuid":"GPU-2","score":{}}]'
    )
    state = node([dev(i) for i in range(3)], hami_io__node_nvidia_score=scores)
    p = pod(req(nums=2, mem=1), hami_io__gpu_scheduler_policy="topology-aware")
    fit = fit_pod(state, p)
    assert sorted(uuids(fit.devices[0])) == ["GPU-0", "GPU-2"]


def test_topology_aware_single_card_takes_the_least_connected() -> None:
    scores = '[{"uuid":"GPU-0","score":{"GPU-1":50}},{"uuid":"GPU-1","score":{"GPU-0":50}},{"uuid":"GPU-2"}]'
    state = node([dev(i) for i in range(3)], hami_io__node_nvidia_score=scores)
    fit = fit_pod(state, pod(req(mem=1), hami_io__gpu_scheduler_policy="topology-aware"))
    assert uuids(fit.devices[0]) == ["GPU-2"]


def test_bad_scoring_weights_fail_the_whole_filter() -> None:
    with pytest.raises(AnnotationError):
        filter_nodes([node([dev(0)])], pod(req(mem=1), hami_io__device_scoring_weights="slot=1,core=1"))


def test_scoring_weights_change_the_device_order() -> None:
    # memory-only weights: GPU-0 is fuller in memory, GPU-1 in slots; binpack follows the weighted score
    state = node([dev(0), dev(1)], [use(1, 8000, 0), use(5, 100, 0)])
    p = pod(
        req(mem=100),
        hami_io__gpu_scheduler_policy="binpack",
        hami_io__device_scoring_weights="memory=1, slot=0, core=0",
    )
    assert uuids(fit_pod(state, p).devices[0]) == ["GPU-0"]
    p = pod(
        req(mem=100),
        hami_io__gpu_scheduler_policy="binpack",
        hami_io__device_scoring_weights="memory=0, slot=1, core=0",
    )
    assert uuids(fit_pod(state, p).devices[0]) == ["GPU-1"]


def test_node_binpack_chooses_the_fullest_node_and_spread_the_emptiest() -> None:
    full = node([dev(0)], [use(5, 5000, 50)], name="full")
    empty = node([dev(0)], name="empty")
    assert filter_nodes([empty, full], pod(req(mem=1))).best.node == "full"  # type: ignore[union-attr]
    spread = filter_nodes([empty, full], pod(req(mem=1)), Policies(node="spread"))
    assert spread.best is not None and spread.best.node == "empty"
    by_annotation = filter_nodes([empty, full], pod(req(mem=1), hami_io__node_scheduler_policy="spread"))
    assert by_annotation.best is not None and by_annotation.best.node == "empty"
    assert sorted(n for n, _ in spread.fits) == ["empty", "full"]


def test_node_score_is_computed_before_placing() -> None:
    fit = fit_pod(node([dev(0)], [use(5, 5000, 50)]), pod(req(mem=1)))
    assert fit.score == pytest.approx(10 * (5 / 10 + 50 / 100 + 5000 / 10000))


def test_non_nvidia_devices_are_not_passed_in() -> None:
    state = node([dev(0), dev(1, type_="AMD-MI300")], [use(10), use()])
    assert fit_pod(state, pod(req(mem=1))).reason == "1/1 CardTimeSlicingExhausted"


def test_apply_and_release_round_trip() -> None:
    devices = (
        (ContainerDevice(uuid=DeviceUUID("GPU-0"), usedmem=100, usedcores=10),),
        (ContainerDevice(uuid=DeviceUUID("GPU-0"), usedmem=50, usedcores=5),),
    )
    base = {DeviceUUID("GPU-0"): use(1, 10, 1)}
    added = apply(base, devices, init_count=1)
    assert added[DeviceUUID("GPU-0")] == use(2, 110, 11)
    assert release(added, devices, init_count=1) == base


def test_with_pod_returns_a_new_state_with_usage() -> None:
    state = node([dev(0)])
    fit = fit_pod(state, pod(req(mem=4000)))
    after = state.with_pod(fit.devices)
    assert after.usage == (use(1, 4000, 0),) and state.usage == (use(),)
    assert after.without_pod(fit.devices).usage == (use(),)


def test_shortcut_and_full_chain_agree_on_a_mixed_cluster() -> None:
    nodes = [
        node([dev(0), dev(1, health=False), dev(2, count=1)], [use(), use(), use(1)], name="a"),
        node([dev(0), dev(1)], [use(3, 9000, 30), use(1, 0, 100)], name="b", hami_io__device_cordon="GPU-0"),
        node([dev(0, core=0), dev(1)], [use(1, 0, 0), use(1, 5000, 0)], name="c"),
    ]
    for r in (
        req(mem=1),
        req(nums=2, mem=1000),
        req(pct=100, cores=100),
        req(pct=50, cores=0),
        req(nums=3, mem=1),
    ):
        result = filter_nodes(nodes, pod(r))
        for n in nodes:
            full = fit_pod(n, pod(r))
            assert (n.name in dict(result.fits)) is full.fit
            if not full.fit:
                assert result.failed[n.name] == full.reason
