"""The outbox's sender against a scripted publish (the port it is given): a refused event is
tried once and dropped wherever it sits in the window, even behind an event NATS could not take
yet; the others all go out and the ordered caller of the refused one gets ``EventRefused``."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from shared.bus import BusStats, EventRefused
from shared.bus.outbox import Outbox
from shared.errors import BusUnavailable
from shared.events import AllocationReleased, Event


def released(pod: str) -> AllocationReleased:
    return AllocationReleased(pod_uid=pod, namespace="ns", name=pod, why="deleted", node="n1")


class ScriptedNats:
    """Refuses the pods named ``refuse`` every time; is away once for the pods named ``away_once``."""

    def __init__(self, refuse: set[str], away_once: set[str]) -> None:
        self.refuse = refuse
        self.away_once = set(away_once)
        self.attempts: Counter[str] = Counter()
        self.stored: list[str] = []

    async def publish(self, event: Event) -> None:
        assert isinstance(event, AllocationReleased)
        self.attempts[event.name] += 1
        await asyncio.sleep(0)
        if event.name in self.refuse:
            raise EventRefused(f"publish {event.KIND}: too large")
        if event.name in self.away_once:
            self.away_once.discard(event.name)
            raise BusUnavailable("NATS is away")
        if event.name not in self.stored:
            self.stored.append(event.name)


async def test_refused_event_behind_an_outage_is_tried_once_and_the_rest_go_out() -> None:
    nats = ScriptedNats(refuse={"big"}, away_once={"b"})
    outbox = Outbox(nats.publish, 100, BusStats())
    try:
        for pod in ("a", "b", "c", "big", "d"):
            outbox.put(released(pod))
        assert await outbox.flush(within_s=10)
    finally:
        await outbox.close(0.0)
    assert sorted(nats.stored) == ["a", "b", "c", "d"]  # c and d landed while b waited: dedup's job
    assert nats.attempts["big"] == 1
    assert len(outbox) == 0


async def test_ordered_caller_of_a_refused_event_gets_event_refused() -> None:
    nats = ScriptedNats(refuse={"big"}, away_once=set())
    outbox = Outbox(nats.publish, 100, BusStats())
    ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    try:
        outbox.put(released("a"))
        outbox.put(released("big"), ack)
        outbox.put(released("c"))
        with pytest.raises(EventRefused):
            await asyncio.wait_for(ack, 10)
        assert await outbox.flush(within_s=10)
    finally:
        await outbox.close(0.0)
    assert nats.stored == ["a", "c"]
