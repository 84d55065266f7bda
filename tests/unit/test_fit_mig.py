"""Flexible MIG in the Fit engine, written from HAMi v2.10's rules.

Sources: ``pkg/device/nvidia/mig_topology.go`` (placement order: 1g and 3g from the highest start,
others from the lowest; overlap), ``pkg/device/nvidia/device.go`` (``selectMigCandidate``: the
smallest profile by memory then slices with a free placement; ``CustomFilterRule`` counts the
container's earlier picks on the card; ``Fit`` reports ``CardMigTopologyInfeasible`` and looks at a
MIG card again after a pick; ``AddResourceUsage`` books the profile's memory and cores),
``pkg/scheduler/score.go`` (``isMIGRequest``: no ``NodeInsufficientDevice`` for MIG requests unless
``nvidia.com/vgpu-mode`` excludes mig), ``pkg/device/nvidia/mig_allocations.go`` (the
``hami.io/vgpu-mig-allocations`` JSON) and ``pkg/device/devices.go`` (``migProfiles`` in the node
register JSON).

Matrix: profile choice by memory; placement order per profile; occupied placements from usage,
from earlier containers and from the same container; infeasible geometry; several instances on
one card; the count check skipped only for MIG requests; apply/release of placements; the
annotations; the ledger agreeing after a rebuild.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.explain import SnapshotError, explain, load_cluster, render_table
from services.scheduler.fit import NodeState, apply, fit_pod, release
from services.scheduler.ledger import Ledger
from services.scheduler.mig import ordered_placements, select_candidate
from services.scheduler.reasons import Reason
from services.scheduler.reconcile import adoptable
from shared import annotations as ann
from shared.errors import AnnotationError
from shared.ledger_entries import decode_allocation, encode_allocation
from shared.model import (
    Allocation,
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    MigPlacement,
    MigProfile,
    MigSlice,
    NodeName,
    PodRequest,
    PodUID,
)


def at(start: int, size: int) -> MigPlacement:
    return MigPlacement(start=start, size=size)


#: An A100-SXM4-80GB as NVML describes it, with HAMi's chart allowlist (1g, 2g, 3g, 7g).
def profile(name: str, memory: int, core: int, slices: int, *placements: MigPlacement) -> MigProfile:
    return MigProfile(name=name, memory_mb=memory, core=core, slice_count=slices, placements=placements)


A100_80 = (
    profile("1g.10gb", 9728, 15, 1, *(at(s, 1) for s in range(7))),
    profile("2g.20gb", 19968, 29, 2, at(0, 2), at(2, 2), at(4, 2)),
    profile("3g.40gb", 40192, 43, 3, at(0, 4), at(4, 4)),
    profile("7g.79gb", 80640, 100, 7, at(0, 8)),
)


def card(i: int = 0, *, mode: str = "mig", count: int = 7) -> DeviceInfo:
    return DeviceInfo(
        id=DeviceUUID(f"GPU-{i}"),
        index=i,
        type="NVIDIA-A100-SXM4-80GB",
        count=count,
        devmem=81920,
        devcore=100,
        mode=mode,
        mig_profiles=A100_80 if mode == "mig" else (),
    )


def held(*placements: MigPlacement, used: int | None = None) -> DeviceUsage:
    return DeviceUsage(used=len(placements) if used is None else used, mig=placements)


def state(*usage: DeviceUsage, devices: tuple[DeviceInfo, ...] = (card(),)) -> NodeState:
    return NodeState(name=NodeName("n1"), devices=devices, usage=usage)


def req(nums: int = 1, mem: int = 0, pct: int = 101, cores: int = 0) -> ContainerRequest:
    return ContainerRequest(nums=nums, memreq=mem, mempercentagereq=pct, coresreq=cores)


def pod(*reqs: ContainerRequest, **annotations: str) -> PodRequest:
    return PodRequest(
        namespace="ns",
        name="p",
        uid=PodUID("u"),
        containers=tuple(ContainerSpec(name=f"c{i}", request=r) for i, r in enumerate(reqs)),
        annotations=annotations,
    )


def slices(devices: tuple[tuple[ContainerDevice, ...], ...]) -> list[list[tuple[str, int, int]]]:
    return [
        [(d.mig.profile, d.mig.placement.start, d.mig.placement.size) for d in slot if d.mig is not None]
        for slot in devices
    ]


# --- profile and placement choice ---------------------------------------------------------------

CHOICES = [
    ("1g from the top", (), 5000, ("1g.10gb", 6, 1)),
    ("exactly the 1g memory", (), 9728, ("1g.10gb", 6, 1)),
    ("one MiB more takes 2g, from the bottom", (), 9729, ("2g.20gb", 0, 2)),
    ("3g from the top", (), 30000, ("3g.40gb", 4, 4)),
    ("3g below a 1g at the top", (at(6, 1),), 30000, ("3g.40gb", 0, 4)),
    ("2g skips an occupied pair", (at(0, 2),), 15000, ("2g.20gb", 2, 2)),
    ("1g fills downwards", (at(6, 1), at(5, 1)), 1, ("1g.10gb", 4, 1)),
    ("1g taken by geometry: the next profile up", tuple(at(s, 1) for s in range(7)), 1, None),
    ("7g needs the whole card", (at(3, 1),), 50000, None),
    ("nothing is large enough", (), 90000, None),
    ("a 0 MiB request takes the smallest", (), 0, ("1g.10gb", 6, 1)),
]


@pytest.mark.parametrize(("why", "occupied", "memory", "expected"), CHOICES, ids=[c[0] for c in CHOICES])
def test_select_candidate_follows_hamis_order(
    why: str, occupied: tuple[MigPlacement, ...], memory: int, expected: tuple[str, int, int] | None
) -> None:
    choice = select_candidate(A100_80, occupied, memory)
    got = None if choice is None else (choice[0].name, choice[1].start, choice[1].size)
    assert got == expected, why


def test_placement_order_prefers_high_starts_only_for_1g_and_3g() -> None:
    """mig_topology.go ``preferHighMigPlacement``."""
    pl = (at(0, 2), at(2, 2), at(4, 2))
    assert [p.start for p in ordered_placements("2g.20gb", pl)] == [0, 2, 4]
    assert [p.start for p in ordered_placements("1g.10gb", pl)] == [4, 2, 0]
    assert [p.start for p in ordered_placements("3g.40gb", pl)] == [4, 2, 0]
    assert [p.start for p in ordered_placements("4g.40gb", pl)] == [0, 2, 4]


# --- Fit ----------------------------------------------------------------------------------------


def test_a_mig_card_books_the_profiles_memory_and_cores() -> None:
    fit = fit_pod(state(held()), pod(req(mem=8000)))
    assert fit.fit
    (d,) = fit.devices[0]
    assert (d.usedmem, d.usedcores, d.mig) == (9728, 15, MigSlice(profile="1g.10gb", placement=at(6, 1)))


def test_percentage_requests_resolve_against_the_cards_memory() -> None:
    fit = fit_pod(state(held()), pod(req(pct=25)))  # 20480 MiB: 2g's 19968 is too small
    assert slices(fit.devices) == [[("3g.40gb", 4, 4)]]


def test_occupied_geometry_is_card_mig_topology_infeasible() -> None:
    fit = fit_pod(state(held(at(0, 4), at(4, 4))), pod(req(mem=1)))
    assert not fit.fit and fit.reason == "1/1 CardMigTopologyInfeasible"


def test_a_whole_card_request_does_not_fit_the_largest_profile() -> None:
    """100 % of the registered 81920 MiB is more than 7g's 80640 MiB."""
    fit = fit_pod(state(held()), pod(req(pct=100)))
    assert fit.reason == "1/1 CardMigTopologyInfeasible"


def test_one_container_gets_several_instances_of_one_card() -> None:
    """device.go re-examines a MIG card after a pick; score.go skips NodeInsufficientDevice."""
    fit = fit_pod(state(held()), pod(req(nums=3, mem=1)))
    assert fit.fit
    assert slices(fit.devices) == [[("1g.10gb", 6, 1), ("1g.10gb", 5, 1), ("1g.10gb", 4, 1)]]
    assert {d.uuid for d in fit.devices[0]} == {"GPU-0"}


def test_more_instances_than_the_geometry_holds_fails_with_hamis_reasons() -> None:
    fit = fit_pod(state(held(at(0, 4), at(4, 2), used=2)), pod(req(nums=2, mem=1)))
    assert not fit.fit
    assert fit.reason == "1/1 AllocatedCardsInsufficientRequest, 1/1 CardMigTopologyInfeasible"


@pytest.mark.parametrize(
    ("mode_annotation", "devices", "reason"),
    [
        (None, (card(0, mode="hami-core"),), Reason.NODE_INSUFFICIENT_DEVICE),
        ("hami-core", (card(0),), Reason.NODE_INSUFFICIENT_DEVICE),
        ("mig", (card(0),), None),
        ("hami-core,mig", (card(0),), None),
        (None, (card(0),), None),
    ],
)
def test_the_card_count_check_is_skipped_only_for_mig_requests(
    mode_annotation: str | None, devices: tuple[DeviceInfo, ...], reason: str | None
) -> None:
    annotations = {} if mode_annotation is None else {ann.VGPU_MODE: mode_annotation}
    fit = fit_pod(state(devices=devices), pod(req(nums=2, mem=1), **annotations))
    if reason is None:
        assert fit.fit
    else:
        assert fit.reason == reason


def test_later_containers_see_earlier_containers_instances() -> None:
    two = fit_pod(state(held()), pod(req(mem=30000), req(mem=30000)))
    assert slices(two.devices) == [[("3g.40gb", 4, 4)], [("3g.40gb", 0, 4)]]
    three = fit_pod(state(held()), pod(req(mem=30000), req(mem=30000), req(mem=1)))
    assert not three.fit and three.reason == "1/1 CardMigTopologyInfeasible"


def test_two_cards_spread_instances_and_the_mode_annotation_selects_cards() -> None:
    devices = (card(0), card(1, mode="hami-core"))
    fit = fit_pod(state(devices=devices), pod(req(mem=1000), **{ann.VGPU_MODE: "mig"}))
    assert [d.uuid for d in fit.devices[0]] == ["GPU-0"]
    shared_only = fit_pod(state(devices=devices), pod(req(mem=1000), **{ann.VGPU_MODE: "hami-core"}))
    assert [(d.uuid, d.mig) for d in shared_only.devices[0]] == [("GPU-1", None)]


def test_apply_and_release_hold_and_free_placements() -> None:
    fit = fit_pod(state(held()), pod(req(nums=2, mem=1)))
    usage = apply({DeviceUUID("GPU-0"): held(at(0, 2))}, fit.devices)
    assert usage[DeviceUUID("GPU-0")].mig == (at(0, 2), at(6, 1), at(5, 1))
    assert usage[DeviceUUID("GPU-0")].usedmem == 2 * 9728
    assert release(usage, fit.devices)[DeviceUUID("GPU-0")].mig == (at(0, 2),)
    after = state(held()).with_pod(fit.devices)
    assert slices(fit_pod(after, pod(req(mem=1))).devices) == [[("1g.10gb", 4, 1)]]


# --- what the bind writes and what a restart reads back ----------------------------------------


def test_mig_allocations_annotation_is_hamis_json() -> None:
    fit = fit_pod(state(held()), pod(req(nums=2, mem=1)))
    devices = ((), *fit.devices)  # an init container without GPU comes first
    assert ann.encode_mig_allocations(devices) == (
        '[{"containerIndex":1,"deviceIndex":0,"gpuUUID":"GPU-0","profile":"1g.10gb",'
        '"placement":{"start":6,"size":1}},'
        '{"containerIndex":1,"deviceIndex":1,"gpuUUID":"GPU-0","profile":"1g.10gb",'
        '"placement":{"start":5,"size":1}}]'
    )
    assert ann.encode_mig_allocations(((),)) == ""
    decoded = ann.decode_mig_allocations(ann.encode_mig_allocations(devices))
    assert decoded[1, 1] == (DeviceUUID("GPU-0"), MigSlice(profile="1g.10gb", placement=at(5, 1)))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"","profile":"1g.10gb",'
         '"placement":{"start":0,"size":1}}]', "MIG allocation 0 is incomplete"),
        ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"1g",'
         '"placement":{"start":0,"size":0}}]', "MIG allocation 0 is incomplete"),
        (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"1g",'
            '"placement":{"start":0,"size":1},"migUUID":"MIG-1"}]',
            "MIG allocation 0 has partial runtime identity",
        ),
        ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"1g","placement":{"start":0,"size":1}},'
         '{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"1g","placement":{"start":1,"size":1}}]',
         "duplicate MIG allocation for container 0 device 0"),
    ],
)
def test_mig_allocations_decoding_refuses_what_hami_refuses(value: str, message: str) -> None:
    """mig_allocations.go ``DecodeMigAllocations``."""
    with pytest.raises(AnnotationError, match=f"^{message}$"):
        ann.decode_mig_allocations(value)


def test_node_register_carries_mig_profiles_in_go_field_order() -> None:
    one = DeviceInfo(
        id=DeviceUUID("GPU-0"), type="NVIDIA-A100-SXM4-40GB", count=7, devmem=40960, mode="mig",
        mig_profiles=(profile("1g.5gb", 4864, 15, 1, at(6, 1)),),
    )
    text = ann.encode_node_devices([one])
    assert text == (
        '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB","mode":"mig",'
        '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,'
        '"placements":[{"start":6,"size":1}]}],"health":true}]'
    )
    assert ann.decode_node_devices(text) == (one,)


def test_a_restarted_scheduler_rebuilds_the_same_placements() -> None:
    fit = fit_pod(state(held()), pod(req(nums=2, mem=1), req(mem=15000)))
    entry = Allocation(
        pod_uid=PodUID("u"), namespace="ns", name="p", node=NodeName("n1"), devices=fit.devices,
        containers=("c0", "c1"),
    )
    restored = decode_allocation(encode_allocation(entry))
    assert restored == entry
    ledger = Ledger()
    ledger.apply(restored, 1)
    assert ledger.usage(NodeName("n1"), DeviceUUID("GPU-0")).mig == (at(6, 1), at(5, 1), at(0, 2))
    ledger.delete(PodUID("u"))
    assert ledger.usage(NodeName("n1"), DeviceUUID("GPU-0")).mig == ()


def test_explain_shows_the_profile_and_placement() -> None:
    """``gpubus explain`` reads ``migProfiles`` and held placements and shows what bind would write."""
    raw_profiles = [ann.mig_profile_wire(p) for p in A100_80]
    cluster = {
        "nodes": [
            {
                "name": "n1",
                "devices": [
                    {"id": "GPU-0", "type": "NVIDIA-A100-SXM4-80GB", "count": 7, "devmem": 81920,
                     "mode": "mig", "migProfiles": raw_profiles, "used": 1, "usedmem": 9728,
                     "usedcores": 15, "mig": [{"start": 6, "size": 1}]},
                ],
            },
        ],
    }
    report = explain(load_cluster(cluster), pod(req(mem=1)))
    view = report["nodes"]["n1"]
    assert view["containers"][0][0]["mig"] == {"profile": "1g.10gb", "start": 5, "size": 1}
    assert view["mig_annotation"] == (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-0","profile":"1g.10gb",'
        '"placement":{"start":5,"size":1}}]'
    )
    assert "GPU-0(9728MiB,15%,MIG 1g.10gb at slice 5)" in render_table(report, "p")
    cluster["nodes"][0]["devices"][0]["mig"] = [{"start": 0, "size": 8}]  # type: ignore[index]
    full = explain(load_cluster(cluster), pod(req(mem=1)))
    assert full["nodes"]["n1"]["reason"] == "1/1 CardMigTopologyInfeasible"
    cluster["nodes"][0]["devices"][0]["mig"] = [{"start": -1, "size": 1}]  # type: ignore[index]
    with pytest.raises(SnapshotError, match=r"^nodes\[0\]\.devices\[0\]\.mig\[0\]\.start: "):
        load_cluster(cluster)


# --- properties: a MIG slice is never double-booked ----------------------------------------------

_POD = st.lists(
    st.tuples(st.integers(1, 3), st.sampled_from([0, 1, 5000, 9728, 15000, 30000, 50000, 81000])),
    min_size=1,
    max_size=2,
)


@settings(max_examples=150, deadline=None)
@given(pods=st.lists(_POD, min_size=1, max_size=12), cards=st.integers(1, 2))
def test_placements_are_legal_and_never_overlap_as_pods_come(
    pods: list[list[tuple[int, int]]], cards: int
) -> None:
    """Whatever sequence of pods arrives, each instance sits at a placement its profile allows,
    holds at least the memory asked, and no two live instances of a card share a memory slice
    (HAMi ``mig_topology.go``); released pods give their slices back."""
    current = state(*(held() for _ in range(cards)), devices=tuple(card(i) for i in range(cards)))
    placed: list[tuple[tuple[ContainerDevice, ...], ...]] = []
    for n, shape in enumerate(pods):
        fit = fit_pod(current, pod(*(req(nums=k, mem=m) for k, m in shape)))
        if not fit.fit:
            continue
        for (k, m), slot in zip(shape, fit.devices, strict=True):
            assert len(slot) == k
            for d in slot:
                assert d.mig is not None
                profile = next(p for p in A100_80 if p.name == d.mig.profile)
                assert d.mig.placement in profile.placements and profile.memory_mb >= m
        current = current.with_pod(fit.devices)
        placed.append(fit.devices)
        if n % 3 == 2:  # now and then the oldest pod finishes
            current = current.without_pod(placed.pop(0))
        for usage in current.usage:
            slices = [s for p in usage.mig for s in range(p.start, p.start + p.size)]
            assert len(slices) == len(set(slices)), usage.mig


# --- adopting a HAMi pod that holds MIG instances (migration from HAMi) ----------------------------


def hami_pod(mig: str, devices: str = "GPU-0,NVIDIA,9728,15:;") -> dict[str, object]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "uid-p",
            "annotations": {ann.DEVICES_ALLOCATED: devices, ann.MIG_ALLOCATIONS: mig},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def test_an_adopted_hami_pod_keeps_its_mig_placements_booked() -> None:
    """HAMi ``scheduler.go`` rebuilds MigAllocationsInUse from ``hami.io/vgpu-mig-allocations``."""
    value = ann.encode_mig_allocations(fit_pod(state(held()), pod(req(mem=1))).devices)
    adopted = adoptable(hami_pod(value))
    assert adopted is not None
    ((card0,),) = adopted.devices
    assert card0.mig == MigSlice(profile="1g.10gb", placement=at(6, 1))
    after = state(held()).with_pod(adopted.devices)
    assert after.usage[0].mig == (at(6, 1),)
    assert slices(fit_pod(after, pod(req(mem=1))).devices) == [[("1g.10gb", 5, 1)]]


def test_a_mig_reservation_on_a_card_the_pod_does_not_hold_is_refused() -> None:
    value = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-9","profile":"1g.10gb",'
        '"placement":{"start":6,"size":1}}]'
    )
    with pytest.raises(AnnotationError, match=r"reserves 1g\.10gb on GPU-9 for container 0 card 0"):
        adoptable(hami_pod(value))
