"""The leader's Allocate handoff slots (issue 32), pure: no NATS, no HTTP.

Matrix of :func:`slot_holder` (one node's entries, a size, the asking pod): an entry holds the slot
only if it is another pod's, DECIDED, has a GPU container of that size and its pod is alive; RESERVED,
APPLIED and FAILED entries, other sizes, the asker's own entry and dead owners never do. Then
:class:`HandoffSlots` over an in-memory ledger: a free slot is had at once; a held one is waited for
until the ledger changes (a wake, never a poll) and its holder is served; a freed slot goes to the
first local waiter, the next waits behind it until that one's decision is in the ledger; sizes of a
pod are taken ascending and all or none; a new leader replays verdicts from before the oldest
entry still waiting for one (bounded); a pod whose ``allocation.applied`` came frees its slots
while its APPLIED write runs (and only then); the budget runs out with ``LeaseTimeout`` naming the holder.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from services.scheduler.handoff_slots import HandoffSlots, LeaseTimeout, slot_holder
from services.scheduler.reconcile import verdicts_since
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

N1 = NodeName("n1")


def entry(uid: str, *sizes: int, state: AllocationState = AllocationState.DECIDED) -> Allocation:
    """A pod on n1 whose GPU containers have these many cards each (0: a container without GPU)."""
    devices = tuple(tuple(ContainerDevice(uuid=DeviceUUID(f"GPU-{i}"), usedmem=10, usedcores=0)
                          for i in range(n)) for n in sizes)
    return Allocation(pod_uid=PodUID(uid), namespace="ns", name=uid, node=N1, devices=devices,
                      containers=tuple(f"c{i}" for i in range(len(sizes))), state=state, decided_at=1.0)


def everyone_alive(uid: str) -> bool:
    return True


@pytest.mark.parametrize(("entries", "size", "holder"), [
    ([], 1, None),
    ([entry("a", 1)], 1, "a"),
    ([entry("a", 1)], 2, None),  # another size: never ambiguous
    ([entry("a", 0, 2)], 2, "a"),  # a container without GPU does not matter
    ([entry("a", 1, 2)], 1, "a"),
    ([entry("a", 1, 2)], 2, "a"),
    ([entry("a", 1, state=AllocationState.RESERVED)], 1, None),  # not decided yet
    ([entry("a", 1, state=AllocationState.APPLIED)], 1, None),  # Allocate served it
    ([entry("a", 1, state=AllocationState.FAILED)], 1, None),
    ([entry("me", 1)], 1, None),  # the asker's own (a retried bind)
    ([entry("a", 1, state=AllocationState.APPLIED), entry("b", 1)], 1, "b"),
])
def test_slot_holder_is_another_alive_pods_decided_entry_of_that_size(
        entries: list[Allocation], size: int, holder: str | None) -> None:
    assert slot_holder(entries, size, PodUID("me"), everyone_alive) == holder


def test_a_dead_owner_holds_nothing() -> None:
    assert slot_holder([entry("gone", 1)], 1, PodUID("me"), lambda uid: uid != "gone") is None


def test_a_pod_allocate_served_holds_nothing_while_its_entry_is_written() -> None:
    assert slot_holder([entry("a", 1)], 1, PodUID("me"), everyone_alive, served={"a"}) is None


class FakeLedger:
    """Entries by pod; every change wakes the slots as State's on_change does."""

    def __init__(self) -> None:
        self.entries: dict[str, Allocation] = {}
        self.slots = HandoffSlots(lambda node: list(self.entries.values()), owner_alive=everyone_alive)

    def put(self, allocation: Allocation) -> None:
        self.entries[allocation.pod_uid] = allocation
        self.slots.wake(allocation.node)

    def applied(self, uid: str) -> None:
        self.put(replace(self.entries[uid], state=AllocationState.APPLIED))


def soon(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


async def test_a_free_slot_is_had_at_once_and_a_held_one_when_allocate_served_its_holder() -> None:
    ledger = FakeLedger()
    ledger.slots.release(await ledger.slots.acquire(N1, [1], PodUID("a"), soon()))
    ledger.put(entry("a", 1))
    waiting = asyncio.create_task(ledger.slots.acquire(N1, [1], PodUID("b"), soon()))
    await asyncio.sleep(0)
    ledger.put(entry("other-size", 2))  # a change on the node: looked at, still held
    await asyncio.sleep(0)
    assert not waiting.done()
    ledger.applied("a")
    ledger.slots.release(await asyncio.wait_for(waiting, 10))


async def test_a_freed_slot_goes_to_the_first_waiter_and_the_next_waits_for_its_decision() -> None:
    ledger = FakeLedger()
    ledger.put(entry("a", 1))
    first = asyncio.create_task(ledger.slots.acquire(N1, [1], PodUID("b"), soon()))
    await asyncio.sleep(0)
    second = asyncio.create_task(ledger.slots.acquire(N1, [1], PodUID("c"), soon()))
    await asyncio.sleep(0)
    ledger.applied("a")
    held = await asyncio.wait_for(first, 10)
    await asyncio.sleep(0)
    assert not second.done()  # queued behind the first, in this process
    ledger.put(entry("b", 1))  # the first one's decision is in the ledger ...
    ledger.slots.release(held)  # ... before it lets the next look
    await asyncio.sleep(0)
    assert not second.done()  # which finds the first's entry holding the slot
    ledger.applied("b")
    ledger.slots.release(await asyncio.wait_for(second, 10))


async def test_a_verdict_frees_the_slot_before_the_entry_is_applied_and_only_while_it_is_written() -> None:
    ledger = FakeLedger()
    ledger.put(entry("a", 1))
    waiting = asyncio.create_task(ledger.slots.acquire(N1, [1], PodUID("b"), soon()))
    await asyncio.sleep(0)
    with ledger.slots.served(PodUID("a"), N1):  # allocation.applied came; the APPLIED write runs
        ledger.slots.release(await asyncio.wait_for(waiting, 10))
    assert ledger.slots.holder(N1, 1, PodUID("c")) == "a"  # the write failed: DECIDED holds again


async def test_sizes_are_taken_ascending_all_or_none() -> None:
    ledger = FakeLedger()
    ledger.put(entry("a", 2))
    with pytest.raises(LeaseTimeout):
        await ledger.slots.acquire(N1, [2, 1], PodUID("b"), soon(0.05))
    # size 1 was had and given back when size 2 timed out: another pod takes it at once
    ledger.slots.release(await ledger.slots.acquire(N1, [1], PodUID("c"), soon()))


async def test_the_budget_runs_out_naming_the_holder() -> None:
    ledger = FakeLedger()
    ledger.put(entry("a", 1))
    with pytest.raises(LeaseTimeout) as raised:
        await ledger.slots.acquire(N1, [1], PodUID("b"), soon(0.05))
    assert raised.value.holder == "a"
    assert "Allocate handoff slot n1/1 is still held by pod a" in str(raised.value)


def decided_at(at: float, state: AllocationState = AllocationState.DECIDED) -> Allocation:
    return replace(entry(f"p{at}", 1, state=state), decided_at=at)


@pytest.mark.parametrize(("entries", "since"), [
    ([], 1000.0 - 10),  # nothing waits for a verdict: the usual window
    ([decided_at(990.0, AllocationState.APPLIED)], 1000.0 - 10),
    ([decided_at(500.0), decided_at(800.0)], 500.0 - 10),  # the oldest waiting entry's verdict
    ([decided_at(2000.0)], 1000.0 - 10),  # decided "after now" (another clock): never later than now
    ([decided_at(-10_000.0)], 1000.0 - 3600),  # at most an hour back
])
def test_a_new_leader_replays_verdicts_from_before_the_oldest_entry_waiting_for_one(
        entries: list[Allocation], since: float) -> None:
    assert verdicts_since(entries, 1000.0, 5.0) == since
