"""The scheduler's State against a real nats-server: releases keep the stream causal.

Cases: a release whose KV delete fails keeps the slice counted (nothing emitted); a decision that
reuses a released slice is stored after the release on the stream.
"""

from __future__ import annotations

import msgpack
import pytest
from asyncwait import wait_until
from bus_settings import bus_settings
from natsproc import NatsServerProcess

from services.scheduler.ledger import Ledger
from services.scheduler.state import State
from shared.bus import Bus
from shared.codec import from_wire
from shared.errors import BusUnavailable
from shared.events import AllocationDecided, AllocationReleased, Event
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

GPU = DeviceUUID("GPU-aaaa")


def allocation(uid: str, node: str = "node-s") -> Allocation:
    return Allocation(pod_uid=PodUID(uid), namespace="ns", name=uid, node=NodeName(node),
                      devices=((ContainerDevice(uuid=GPU, usedmem=1000, usedcores=10),),),
                      containers=("main",), state=AllocationState.RESERVED, decided_at=1.0)


async def test_a_release_whose_kv_delete_fails_keeps_the_slice_counted(
        private_nats: NatsServerProcess) -> None:
    bus = await Bus.connect(bus_settings(private_nats.url), source="scheduler")
    state = State(bus, Ledger())
    try:
        await bus.ensure_schema()
        await state.load()
        await state.begin_term("test", within_s=10.0)
        await state.decide(allocation("p1"))
        assert state.ledger.entry(PodUID("p1")) is not None
        private_nats.stop()
        await wait_until(lambda: not bus.is_connected, what="disconnect noticed")
        with pytest.raises(BusUnavailable):
            await state.release(PodUID("p1"), "deleted")
        held = state.ledger.entry(PodUID("p1"))
        assert held is not None and held.state is AllocationState.DECIDED  # still in KV: still counted
        assert bus.outbox_size == 0  # and no allocation.released queued for it
        private_nats.start()
        await wait_until(lambda: bus.is_connected, timeout=20, what="reconnect")
    finally:
        await state.close()
        await bus.close()


async def test_a_decision_after_a_release_is_stored_after_it(bus: Bus) -> None:
    state = State(bus, Ledger())
    try:
        await state.load()
        await state.begin_term("test", within_s=10.0)
        await state.decide(allocation("old", node="node-c"))
        for i in range(300):  # a backlog in the outbox, as at busy times
            bus.emit(AllocationReleased(pod_uid=f"x{i}", namespace="ns", name=f"x{i}", why="t",
                                        node="node-x"))
        await state.release(PodUID("old"), "finished")
        await state.decide(allocation("new", node="node-c"))
        seen: list[Event] = []

        async def collect(event: Event) -> None:
            seen.append(event)
        await bus.route(("gpubus.allocation.decided.*", "gpubus.allocation.released.*"), "node-c",
                        collect, deliver="all")
        await wait_until(lambda: len(seen) == 3, what="three events")
        kinds = [(type(e).__name__, getattr(e, "pod_uid", None) or e.allocation.pod_uid)  # type: ignore[attr-defined]
                 for e in seen]
        assert kinds == [("AllocationDecided", "old"), ("AllocationReleased", "old"),
                         ("AllocationDecided", "new")]
        assert isinstance(seen[1], AllocationReleased) and isinstance(seen[2], AllocationDecided)
        entry = await (await bus.kv("allocations")).get("new")
        assert entry is not None
        stored = from_wire(Allocation, msgpack.unpackb(entry.value, raw=False))
        assert stored.state is AllocationState.DECIDED
    finally:
        await state.close()
