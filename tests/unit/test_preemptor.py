"""The preemption loop (:mod:`services.scheduler.preemptor`) on a real ledger and Placement, with a
recording stand-in for the API server.

Cases: a higher-priority pod evicts the fewest pods of one card, nominates the node, publishes
``pod.preempted`` per victim and records an Event on both pods; a victim whose eviction a budget
refuses (429 on the dry run) is spared and the plan made again; every candidate protected: no
eviction at all; equal priority, ``preemptionPolicy: Never``, a bound pod, a re-created pod: no
eviction. Holding the room: each victim leaving the ledger leaves a placeholder with its slices
(no other pod fits there), and once all have left the pod's own reservation replaces them and the
pod is requeued; the hold ends when the pod's entry is decided, or when its time runs out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from services.scheduler.fit import Policies
from services.scheduler.ledger import Ledger, NodeInventory
from services.scheduler.placement import Placement
from services.scheduler.preemptor import PLACEHOLDER, EvictionRefused, Outcome, Preemptor
from shared.events import Event, PodPreempted, PodUnschedulable
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodRequest,
    PodUID,
)

N1 = NodeName("node-1")
CARDS = (DeviceUUID("GPU-0"), DeviceUUID("GPU-1"))
MEM = 80_000
NOW = 1000.0


class FakeApi:
    """The API server as preemption sees it: pods by name, evictions recorded, budgets by name."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.protected: set[str] = set()
        self.evicted: list[str] = []
        self.dry_runs: list[str] = []
        self.nominated: dict[str, str] = {}
        self.requeued: list[str] = []
        self.events: list[tuple[str, str, str]] = []

    def add(self, name: str, priority: int, *, mem: int = 0, policy: str | None = None,
            node: str = "") -> None:
        spec: dict[str, Any] = {"priority": priority, "containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem or 1}}}]}
        if policy:
            spec["preemptionPolicy"] = policy
        if node:
            spec["nodeName"] = node
        self.pods[("ns", name)] = {"metadata": {"namespace": "ns", "name": name, "uid": name}, "spec": spec}

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.pods.get((namespace, name))

    async def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> None:
        if name in self.protected:
            raise EvictionRefused("Cannot evict pod as it would violate the pod's disruption budget.")
        (self.dry_runs if dry_run else self.evicted).append(name)

    async def nominate(self, namespace: str, name: str, node: str) -> None:
        self.nominated[name] = node

    async def requeue(self, namespace: str, name: str, stamp: str) -> None:
        self.requeued.append(name)

    async def record(self, pod: Mapping[str, Any], reason: str, message: str, kind: str = "Normal") -> None:
        self.events.append((pod["metadata"]["name"], reason, message))


class Sink:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)


class Leader:
    is_leader = True


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _entry(name: str, card: int, mem: int) -> Allocation:
    return Allocation(pod_uid=PodUID(name), namespace="ns", name=name, node=N1,
                      devices=((ContainerDevice(uuid=CARDS[card], usedmem=mem, usedcores=10),),),
                      containers=("c",), state=AllocationState.APPLIED)


def _request(name: str, mem: int) -> PodRequest:
    return PodRequest(namespace="ns", name=name, uid=PodUID(name), containers=(
        ContainerSpec(name="c", request=ContainerRequest(nums=1, memreq=mem, coresreq=10)),))


def _world(priorities: Mapping[str, int]) -> tuple[Ledger, Preemptor, FakeApi, Sink, Clock, list[Outcome]]:
    """One node of two 80000 MiB cards; pods low-<card>-<i> of 20000 MiB, four a card."""
    ledger = Ledger()
    ledger.set_inventory(N1, NodeInventory(devices=tuple(
        DeviceInfo(id=c, index=i, type="NVIDIA-A100", devmem=MEM, count=10) for i, c in enumerate(CARDS)),
        seen_at=NOW, heartbeat_s=1e9))
    api, sink, clock = FakeApi(), Sink(), Clock()
    outcomes: list[Outcome] = []
    for card in range(2):
        for i in range(4):
            name = f"low-{card}-{i}"
            ledger.apply(_entry(name, card, 20_000), card * 4 + i + 1)
            api.add(name, priorities.get(name, 100), node=N1)
    placement = Placement(ledger, Policies())
    preemptor = Preemptor(placement=placement, api=api, events=sink, leadership=Leader(), clock=clock,
                          hold_s=60.0, on_outcome=outcomes.append)
    return ledger, preemptor, api, sink, clock, outcomes


async def _refused(preemptor: Preemptor, name: str) -> None:
    await preemptor.on_event(PodUnschedulable(namespace="ns", name=name, uid=name,
                                              reasons={N1: "2/2 CardInsufficientMemory"}))


async def test_evicts_the_fewest_pods_of_one_card_and_says_so() -> None:
    ledger, preemptor, api, sink, _, outcomes = _world({"low-0-0": 50, "low-0-1": 50})
    api.add("urgent", 1000, mem=40_000)
    await _refused(preemptor, "urgent")
    assert outcomes[-1].action == "preempted"
    assert sorted(api.evicted) == ["low-0-0", "low-0-1"]  # the lowest priorities, both on GPU-0
    assert api.nominated == {"urgent": N1}
    preempted = [e for e in sink.events if isinstance(e, PodPreempted)]
    assert sorted(e.name for e in preempted) == ["low-0-0", "low-0-1"]
    assert all(e.card == CARDS[0] and e.node == N1 and e.beneficiary_name == "urgent"
               and e.beneficiary_priority == 1000 and e.priority == 50 for e in preempted)
    assert {(n, r) for n, r, _ in api.events} == {("low-0-0", "Preempted"), ("low-0-1", "Preempted"),
                                                  ("urgent", "Preempting")}
    del ledger


async def test_a_budget_spares_its_pods_and_the_plan_is_made_again() -> None:
    _, preemptor, api, _, _, outcomes = _world({"low-0-0": 50, "low-0-1": 50})
    api.protected = {"low-0-0", "low-0-1"}
    api.add("urgent", 1000, mem=40_000)
    await _refused(preemptor, "urgent")
    assert outcomes[-1].action == "preempted"
    assert set(outcomes[-1].spared) <= {"ns/low-0-0", "ns/low-0-1"} and outcomes[-1].spared
    assert not {"low-0-0", "low-0-1"} & set(api.evicted) and len(api.evicted) == 2


async def test_every_candidate_protected_evicts_no_one() -> None:
    _, preemptor, api, _, _, outcomes = _world({})
    api.protected = {f"low-{c}-{i}" for c in range(2) for i in range(4)}
    api.add("urgent", 1000, mem=40_000)
    await _refused(preemptor, "urgent")
    assert outcomes[-1].action == "no_plan" and not api.evicted and not api.nominated


@pytest.mark.parametrize(("priority", "policy", "node", "action"), [
    (100, None, "", "no_plan"),  # equal priority is never a victim
    (1000, "Never", "", "never"),
    (1000, None, N1, "not_pending"),
])
async def test_no_eviction(priority: int, policy: str | None, node: str, action: str) -> None:
    _, preemptor, api, sink, _, outcomes = _world({})
    api.add("urgent", priority, mem=40_000, policy=policy, node=node)
    await _refused(preemptor, "urgent")
    assert outcomes[-1].action == action
    assert not api.evicted and not api.dry_runs and not sink.events


async def test_a_late_refusal_of_a_pod_decided_and_not_yet_bound_plans_no_second_round() -> None:
    # the room was made and the pod decided (its entry written before the Binding), while a
    # pod.unschedulable published before that is handled only now: the API still shows it pending
    ledger, preemptor, api, sink, _, outcomes = _world({"low-0-0": 50, "low-0-1": 50})
    api.add("urgent", 1000, mem=40_000)
    ledger.delete(PodUID("low-0-0"))
    ledger.delete(PodUID("low-0-1"))
    ledger.apply(replace(_entry("urgent", 0, 40_000), state=AllocationState.DECIDED), 99)
    await _refused(preemptor, "urgent")
    assert outcomes[-1].action == "not_pending"
    assert not api.evicted and not api.dry_runs and not sink.events


async def test_a_recreated_pod_is_not_the_one_refused() -> None:
    _, preemptor, api, _, _, outcomes = _world({})
    api.add("urgent", 1000, mem=40_000)
    await preemptor.on_event(PodUnschedulable(namespace="ns", name="urgent", uid="an-older-uid"))
    assert outcomes[-1].action == "gone" and not api.evicted


async def test_the_freed_room_is_held_until_the_pod_binds() -> None:
    ledger, preemptor, api, _, _, _ = _world({"low-0-0": 50, "low-0-1": 50})
    api.add("urgent", 1000, mem=40_000)
    await _refused(preemptor, "urgent")
    placement = Placement(ledger, Policies())
    other = _request("sneaky", 20_000)

    ledger.delete(PodUID("low-0-0"))  # the first victim is gone: its slice is a placeholder now
    preemptor.on_change(N1)
    assert ledger.entry(PodUID(PLACEHOLDER + "low-0-0")) is not None
    assert not placement.decide(other, N1, NOW).fit

    ledger.delete(PodUID("low-0-1"))  # both gone: the pod's own reservation replaces the placeholders
    preemptor.on_change(N1)
    held = ledger.entry(PodUID("urgent"))
    assert held is not None and held.state is AllocationState.RESERVED
    assert held.devices[0][0].uuid == CARDS[0] and held.devices[0][0].usedmem == 40_000
    assert ledger.entry(PodUID(PLACEHOLDER + "low-0-0")) is None
    assert not placement.decide(other, N1, NOW).fit
    await asyncio.sleep(0)  # the requeue patch is a task of its own
    assert api.requeued == ["urgent"]

    # any later change on the node (here the end of the eviction round itself, when the victims
    # left during it) must not bring the placeholders back beside the pod's reservation: filter
    # drops that reservation to judge the pod afresh, and placeholders would then refuse it
    preemptor.on_change(N1)
    assert ledger.entry(PodUID(PLACEHOLDER + "low-0-0")) is None
    assert ledger.entry(PodUID(PLACEHOLDER + "low-0-1")) is None
    ledger.delete(PodUID("urgent"))  # what filter's drop_provisional does before its Fit
    assert placement.decide(_request("urgent", 40_000), N1, NOW).fit

    ledger.apply(Allocation(pod_uid=PodUID("urgent"), namespace="ns", name="urgent", node=N1,
                            devices=held.devices, containers=("c",)), 99)  # bound: decided
    preemptor.on_change(N1)
    assert not preemptor.holds


async def test_a_hold_ends_when_its_time_runs_out() -> None:
    ledger, preemptor, api, _, clock, outcomes = _world({"low-0-0": 50, "low-0-1": 50})
    api.add("urgent", 1000, mem=40_000)
    await _refused(preemptor, "urgent")
    ledger.delete(PodUID("low-0-0"))
    preemptor.on_change(N1)
    await _refused(preemptor, "urgent")
    assert outcomes[-1].action == "held" and len(api.evicted) == 2  # no second round while held
    clock.now = NOW + 61
    preemptor.on_change(N1)
    assert not preemptor.holds
    assert ledger.entry(PodUID(PLACEHOLDER + "low-0-0")) is None
