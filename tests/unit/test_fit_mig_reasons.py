"""The reasons of a MIG request that does not fit, against HAMi v2.10's own test vectors.

HAMi's ``Fit`` (``pkg/device/nvidia/device.go``) adds ``AllocatedCardsInsufficientRequest`` (the
number of cards or instances the container took) only when it took at least one before the scan
ran out (``len(tmpDevs[k.Type]) > 0``); a card without a free placement counts
``CardMigTopologyInfeasible``; ``fitInDevices`` (``pkg/scheduler/score.go``) adds nothing to the
string. It looks at a MIG card again after every pick, topology-aware or not.

Cases: HAMi's ``pkg/scheduler/mig_allocation_test.go`` single-card vectors (two placements free:
fits with two; one free: both reasons; a hami-core card: ``NodeInsufficientDevice``); a request no
card takes anything for (only ``CardMigTopologyInfeasible``, whatever the count); one card takes an
instance, another none; topology-aware MIG requests; a node with both kinds (each card's reason
from the scan of its kind).
"""

from __future__ import annotations

import pytest

from services.scheduler.fit import NodeState, fit_pod
from shared import annotations as ann
from shared.model import (
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    MigPlacement,
    MigProfile,
    NodeName,
    PodRequest,
    PodUID,
)


def at(start: int) -> MigPlacement:
    return MigPlacement(start=start, size=1)


def hami_card(name: str, mode: str, *placements: MigPlacement) -> DeviceInfo:
    """``singleNvidiaGPUNode``: 40960 MiB, 7 slots, one profile ``1g.5gb`` (5120 MiB, 14 %)."""
    profiles = (
        (MigProfile(name="1g.5gb", memory_mb=5120, core=14, slice_count=1, placements=placements),)
        if mode == "mig"
        else ()
    )
    return DeviceInfo(
        id=DeviceUUID(name),
        type="NVIDIA",
        count=7,
        devmem=40960,
        devcore=100,
        mode=mode,
        mig_profiles=profiles,
    )


def node(*cards: DeviceInfo, usage: tuple[DeviceUsage, ...] = ()) -> NodeState:
    return NodeState(name=NodeName("single-gpu-node"), devices=cards, usage=usage)


def pod(nums: int = 2, mem: int = 4000, mode: str | None = "mig", policy: str | None = None) -> PodRequest:
    """``twoNvidiaDeviceRequest``: one container, ``nvidia.com/gpu: 2``, ``gpumem: 4000``."""
    notes = {ann.VGPU_MODE: mode} if mode else {}
    if policy:
        notes[ann.GPU_SCHEDULER_POLICY] = policy
    return PodRequest(
        namespace="multi-device-test",
        name="two-nvidia-devices",
        uid=PodUID("u"),
        containers=(ContainerSpec(name="workload", request=ContainerRequest(nums=nums, memreq=mem)),),
        annotations=notes,
    )


def placements(slot: tuple[ContainerDevice, ...]) -> list[tuple[str, int]]:
    return [(d.uuid, d.mig.placement.start) for d in slot if d.mig is not None]


def test_hamis_vector_two_free_placements_give_one_container_two_instances() -> None:
    """``TestFitInDevicesAllowsMultipleMigPlacementsOnSingleGPU``."""
    fit = fit_pod(node(hami_card("GPU-a", "mig", *(at(s) for s in range(7)))), pod())
    assert fit.fit
    assert placements(fit.devices[0]) == [("GPU-a", 6), ("GPU-a", 5)]


def test_hamis_vector_one_free_placement_reports_both_reasons() -> None:
    """``TestFitInDevicesRejectsInsufficientMigPlacementsOnSingleGPU``: the first instance is taken,
    the card looked at again has no placement left."""
    fit = fit_pod(node(hami_card("GPU-a", "mig", at(6))), pod())
    assert not fit.fit
    assert fit.reason == "1/1 AllocatedCardsInsufficientRequest, 1/1 CardMigTopologyInfeasible"


def test_hamis_vector_a_hami_core_card_keeps_the_count_check() -> None:
    """``TestFitInDevicesRetainsPhysicalCountCheckForNonMigGPU``."""
    fit = fit_pod(node(hami_card("GPU-a", "hami-core")), pod(mode="hami-core"))
    assert fit.reason == "NodeInsufficientDevice"


@pytest.mark.parametrize("nums", [1, 2, 3])
def test_a_request_no_card_takes_anything_for_reports_only_the_topology(nums: int) -> None:
    """6000 MiB is more than the only profile holds: nothing is taken, so no AllocatedCards... (HAMi
    counts it only when ``tmpDevs`` is not empty)."""
    fit = fit_pod(node(hami_card("GPU-a", "mig", at(6))), pod(nums=nums, mem=6000))
    assert fit.reason == "1/1 CardMigTopologyInfeasible"


def test_one_card_gives_an_instance_and_another_none() -> None:
    full = DeviceUsage(used=1, usedmem=5120, usedcores=14, mig=(at(6),))
    cards = (hami_card("GPU-a", "mig", at(6)), hami_card("GPU-b", "mig", at(6)))
    fit = fit_pod(node(*cards, usage=(DeviceUsage(), full)), pod())
    assert fit.reason == "1/2 AllocatedCardsInsufficientRequest, 2/2 CardMigTopologyInfeasible"


@pytest.mark.parametrize(("nums", "expected"), [(1, [("GPU-a", 6)]), (2, [("GPU-a", 6), ("GPU-a", 5)])])
def test_a_topology_aware_request_looks_at_a_mig_card_again(
    nums: int, expected: list[tuple[str, int]]
) -> None:
    """HAMi's ``i++`` for a MIG card is outside its ``needTopology`` branch: every instance the card can
    give is a candidate, then the combination (all of one card: pair scores 0, the first wins)."""
    card = hami_card("GPU-a", "mig", *(at(s) for s in range(7)))
    fit = fit_pod(node(card), pod(nums=nums, policy="topology-aware"))
    assert fit.fit
    assert placements(fit.devices[0]) == expected


def test_a_topology_aware_request_the_card_cannot_give_enough_reports_both_reasons() -> None:
    """Two instances taken of one card: HAMi counts instances over cards (``2/1``), sorted as strings."""
    fit = fit_pod(node(hami_card("GPU-a", "mig", at(5), at(6))), pod(nums=3, policy="topology-aware"))
    assert fit.reason == "1/1 CardMigTopologyInfeasible, 2/1 AllocatedCardsInsufficientRequest"


def test_on_a_node_with_both_kinds_each_card_is_explained_by_the_scan_of_its_kind() -> None:
    """gpubus only (HAMi registers one mode per node): the MIG card gives one instance, the shared
    card takes the container alone and runs out too."""
    cards = (hami_card("GPU-a", "mig", at(6)), hami_card("GPU-b", "hami-core"))
    fit = fit_pod(node(*cards), pod(mode=None))
    assert fit.reason == "1/2 CardMigTopologyInfeasible, 2/2 AllocatedCardsInsufficientRequest"
