"""The leader's term and fenced decisions, on State against a real nats-server (issue 32).

Cases: a replica with no term decides nothing; of two replicas that both believe they lead, the one
whose term is older has its decision refused by JetStream (nothing stored, no event sent) while the
newer one's is stored; a decision fenced on a term that has moved on, arriving late, is refused; a
new term's ledger holds every decision stored before the bump before ``begin_term`` returns; the
term key is not a ledger entry for any reader (nothing counted as bad input). A leader in its term
follows its own writes only (no echo reaches it) and catches up on what others wrote meanwhile
when its term ends or it begins another; an adoption that finds an entry reads it in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from asyncwait import wait_until
from bus_settings import bus_settings

from services.scheduler.ledger import Ledger
from services.scheduler.state import State
from shared.bus import ALLOCATIONS, Bus, read_typed
from shared.errors import Fenced
from shared.events import AllocationDecided, Event
from shared.ledger_entries import TERM_KEY, decode_entry, encode_allocation, is_entry_key
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

GPU = DeviceUUID("GPU-aaaa")


def allocation(uid: str, node: str = "node-t") -> Allocation:
    return Allocation(pod_uid=PodUID(uid), namespace="ns", name=uid, node=NodeName(node),
                      devices=((ContainerDevice(uuid=GPU, usedmem=1000, usedcores=10),),),
                      containers=("main",), state=AllocationState.RESERVED, decided_at=1.0)


@pytest.fixture
async def replicas(bus: Bus, nats_url: str) -> AsyncIterator[tuple[State, State]]:
    """Two scheduler replicas' States, each on its own connection, both loaded."""
    bad_input: list[tuple[str, str]] = []
    buses = [await Bus.connect(bus_settings(nats_url), source=f"scheduler/{name}") for name in "ab"]
    states = [State(b, Ledger(), on_input_error=lambda source, kind: bad_input.append((source, kind)))
              for b in buses]
    try:
        for state in states:
            await state.load()
        yield states[0], states[1]
        assert bad_input == []  # the term key is not taken for a bad ledger entry
    finally:
        for state, b in zip(states, buses, strict=True):
            await state.close()
            await b.close()


async def decisions_until(bus: Bus, node: str, last: str) -> list[str]:
    """The pods ``allocation.decided`` names for ``node``, replayed from the stream up to ``last``."""
    seen: list[str] = []

    async def collect(event: Event) -> None:
        if isinstance(event, AllocationDecided):
            seen.append(event.allocation.pod_uid)
    sub = await bus.route(("gpubus.allocation.decided.*",), node, collect, deliver="all")
    try:
        await wait_until(lambda: last in seen, what=f"the decision of {last}")
    finally:
        await sub.stop()
    return seen


async def test_a_replica_without_a_term_decides_nothing(bus: Bus, replicas: tuple[State, State]) -> None:
    state, _ = replicas
    with pytest.raises(Fenced):
        await state.decide(allocation("p"))
    assert await (await bus.kv(ALLOCATIONS)).get("p") is None
    assert state.ledger.entry(PodUID("p")) is None


async def test_of_two_believing_leaders_the_older_terms_decision_is_refused_by_the_store(
        bus: Bus, replicas: tuple[State, State]) -> None:
    old, new = replicas
    old_term = await old.begin_term("old", within_s=10.0)
    await old.decide(allocation("before"))  # stored: the old term was still the term
    new_term = await new.begin_term("new", within_s=10.0)
    assert new_term > old_term
    assert new.ledger.entry(PodUID("before")) is not None  # the new term starts knowing it
    with pytest.raises(Fenced):
        await old.decide(allocation("split"))  # the partitioned leader still believes it leads
    await new.decide(allocation("fine"))
    kv = await bus.kv(ALLOCATIONS)
    assert await kv.get("split") is None
    assert old.ledger.entry(PodUID("split")) is None
    assert (await kv.get("fine")) is not None
    # the refused decision never reached a node-agent: its event waits for the stored entry
    assert await decisions_until(bus, "node-t", "fine") == ["before", "fine"]


async def test_a_stale_decision_arriving_after_the_new_term_is_refused(
        bus: Bus, replicas: tuple[State, State]) -> None:
    """The write as it leaves a deposed leader, delivered after the bump (a slow link, a queue)."""
    old, new = replicas
    old_term = await old.begin_term("old", within_s=10.0)
    await new.begin_term("new", within_s=10.0)
    kv = await bus.kv(ALLOCATIONS)
    late = encode_allocation(allocation("late"))
    with pytest.raises(Fenced):
        await kv.put("late", late, fence=(TERM_KEY, old_term))
    assert await kv.get("late") is None


async def test_a_new_term_holds_every_decision_stored_before_it(
        bus: Bus, replicas: tuple[State, State]) -> None:
    old, new = replicas
    await old.begin_term("old", within_s=10.0)
    for i in range(50):
        await old.decide(allocation(f"p{i}", node=f"node-{i % 5}"))
    await new.begin_term("new", within_s=10.0)  # no wait here: begin_term itself waited
    assert {a.pod_uid for a in new.ledger.entries()} == {f"p{i}" for i in range(50)}
    assert all(a.state is AllocationState.DECIDED for a in new.ledger.entries())


async def test_the_term_key_is_no_ledger_entry_for_any_reader(
        bus: Bus, replicas: tuple[State, State]) -> None:
    old, new = replicas
    skipped: list[str] = []
    await old.begin_term("old", within_s=10.0)
    await old.decide(allocation("p"))
    await new.begin_term("new", within_s=10.0)
    assert len(new.ledger) == 1 and len(old.ledger) == 1
    read = await read_typed(await bus.kv(ALLOCATIONS), decode_entry, lambda k, e: skipped.append(k),
                            keep=is_entry_key)
    assert list(read.values) == ["p"] and skipped == []
    assert not is_entry_key(TERM_KEY) and is_entry_key("p")


async def test_a_leader_in_its_term_gets_no_echo_of_its_own_writes(
        bus: Bus, replicas: tuple[State, State]) -> None:
    leader, standby = replicas
    await leader.begin_term("leader", within_s=10.0)
    await leader.follow_own_writes()
    heard, standby_heard = leader.ledger_deliveries, standby.ledger_deliveries
    await leader.decide(allocation("p"))
    await leader.set_state(PodUID("p"), AllocationState.APPLIED)
    await leader.decide(allocation("q"))
    await leader.release(PodUID("p"), "finished")
    # the standby follows every write (three for p, one for q); the leader applied them itself
    await wait_until(lambda: standby.ledger_deliveries == standby_heard + 4, what="the standby's four")
    assert leader.ledger_deliveries == heard
    assert {a.pod_uid for a in leader.ledger.entries()} == {"q"}
    assert {a.pod_uid for a in standby.ledger.entries()} == {"q"}


async def test_what_a_deposed_leader_writes_late_reaches_the_leader_once_its_term_ends(
        bus: Bus, replicas: tuple[State, State]) -> None:
    """The writes a leader in its term does not see (a deposed leader's late release) are replayed
    when it follows the bucket again; its own writes replayed with them change nothing, and a pod
    decided again after its delete keeps its newest entry."""
    leader, _ = replicas
    await leader.begin_term("leader", within_s=10.0)
    await leader.follow_own_writes()
    await leader.decide(allocation("gone-elsewhere"))
    await leader.decide(allocation("again"))
    await leader.release(PodUID("again"), "bind failed")
    await leader.decide(allocation("again"))  # decided again after its delete: a newer revision
    newest = leader.ledger.revision(PodUID("again"))
    kv = await bus.kv(ALLOCATIONS)
    await kv.delete("gone-elsewhere")  # a deposed leader's late release (unfenced: it frees only)
    assert leader.ledger.entry(PodUID("gone-elsewhere")) is not None  # more than KV holds: safe
    leader.end_term()
    await leader.follow_ledger()
    await wait_until(lambda: leader.ledger.entry(PodUID("gone-elsewhere")) is None, what="the late release")
    assert leader.ledger.revision(PodUID("again")) == newest
    assert {a.pod_uid for a in leader.ledger.entries()} == {"again"}


async def test_a_leader_deposed_unawares_holds_its_successors_decisions_when_it_leads_again(
        bus: Bus, replicas: tuple[State, State]) -> None:
    first, second = replicas
    await first.begin_term("first", within_s=10.0)
    await first.follow_own_writes()
    await second.begin_term("second", within_s=10.0)
    await second.follow_own_writes()
    await second.decide(allocation("of-second"))
    await first.begin_term("first", within_s=10.0)  # follows the bucket again, from where it stopped
    held = first.ledger.entry(PodUID("of-second"))
    assert held is not None and held.state is AllocationState.DECIDED


async def test_an_adoption_that_finds_an_entry_reads_it_into_the_leaders_ledger(
        bus: Bus, replicas: tuple[State, State]) -> None:
    leader, _ = replicas
    await leader.begin_term("leader", within_s=10.0)
    await leader.follow_own_writes()
    theirs = replace(allocation("adopted"), state=AllocationState.APPLIED)
    await (await bus.kv(ALLOCATIONS)).put("adopted", encode_allocation(theirs))  # a deposed leader's
    assert not await leader.adopt(replace(theirs, node=NodeName("node-u")))
    held = leader.ledger.entry(PodUID("adopted"))
    assert held is not None and held.node == "node-t"


async def test_a_delete_marker_of_a_key_never_held_changes_nothing(
        bus: Bus, replicas: tuple[State, State]) -> None:
    """Outside input on the standby's watch: markers of an unknown pod and of a key that is no pod
    (the fixture checks that nothing was counted as bad input)."""
    leader, standby = replicas
    await leader.begin_term("leader", within_s=10.0)
    await leader.decide(allocation("kept"))
    kv = await bus.kv(ALLOCATIONS)
    heard = standby.ledger_deliveries
    await kv.delete("never-written")
    await kv.delete("not_a.pod-key")
    await wait_until(lambda: standby.ledger_deliveries >= heard + 2, what="both markers delivered")
    assert {a.pod_uid for a in standby.ledger.entries()} == {"kept"}
    await leader.decide(allocation("after"))  # and the watch goes on
    await wait_until(lambda: standby.ledger.entry(PodUID("after")) is not None, what="the next entry")
