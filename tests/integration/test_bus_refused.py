"""Events NATS can never store, against a real nats-server: refused at once, never retried.

Cases: an event over the server's max_payload, published directly, raises ``EventRefused`` (not
``BusUnavailable``), is logged with its kind and size and counted; one whose body fits but whose
``Nats-Msg-Id`` header pushes it over is refused before it is sent (the server would drop the
connection); emitted, it is dropped and the events queued around it go out exactly once; through
``publish_in_order`` its caller gets ``EventRefused`` and the next ordered event still goes out;
a JetStream refusal (the stream's ``max_msg_size``) is permanent in the same way.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from asyncwait import wait_until
from bus_settings import bus_settings
from nats.aio.msg import Msg
from natsproc import NatsServerProcess
from test_bus import Collector

from shared.bus import STREAM, Bus, EventRefused, schema
from shared.codec import encode
from shared.events import AllocationReleased

NODE = "node-big"
DECISIONS = ("gpubus.allocation.released.*",)


def released(why: str = "deleted", pod: str = "p") -> AllocationReleased:
    return AllocationReleased(pod_uid=uuid.uuid4().hex, namespace="ns", name=pod, why=why, node=NODE,
                              source="test")  # as published: the bus stamps an empty source


def released_of_size(size: int) -> AllocationReleased:
    """An event whose encoded body is exactly ``size`` bytes (``size`` > 70 000)."""
    probe = released(why="x" * 70_000)
    return released(why="x" * (70_000 + size - len(encode(probe))))


async def test_event_over_max_payload_raises_event_refused_logged_and_counted(
        bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    big = released_of_size(bus.nc.max_payload + 1)
    with caplog.at_level(logging.WARNING, logger="shared.bus"), \
            pytest.raises(EventRefused, match="max_payload"):
        await bus.publish(big)
    assert (bus.stats.refused, bus.stats.published) == (1, 0)
    assert any("allocation.released" in r.getMessage() and str(bus.nc.max_payload + 1) in r.getMessage()
               for r in caplog.records if r.levelno >= logging.WARNING)


async def test_header_pushing_an_event_over_max_payload_is_refused_before_it_is_sent(bus: Bus) -> None:
    fits_alone = released_of_size(bus.nc.max_payload - 8)
    with pytest.raises(EventRefused, match="header"):
        await bus.publish(fits_alone)
    assert bus.stats.disconnects == 0
    after = released()
    await bus.publish(after)
    assert bus.stats.published == 1


async def test_emitted_oversize_event_is_dropped_and_the_events_around_it_go_out_once(bus: Bus) -> None:
    seen: list[str] = []

    async def raw(msg: Msg) -> None:
        seen.append((msg.headers or {}).get("Nats-Msg-Id", ""))

    watcher = await bus.nc.subscribe(f"gpubus.allocation.released.{NODE}", cb=raw)
    before = [released(pod=f"before{i}") for i in range(3)]
    after = [released(pod=f"after{i}") for i in range(3)]
    for e in [*before, released_of_size(bus.nc.max_payload * 2), *after]:
        bus.emit(e)
    assert await bus.flush(within_s=10)
    await bus.nc.flush()  # every publish the server routed to our raw watcher has arrived
    await watcher.unsubscribe()
    wanted = [e.id for e in (*before, *after)]
    assert seen == wanted
    assert (bus.stats.refused, bus.stats.dropped, bus.outbox_size) == (1, 0, 0)
    stored = Collector()
    await bus.route(DECISIONS, NODE, stored, deliver="all")
    await wait_until(lambda: len(stored.events) == len(wanted), what="the six stored events")
    assert stored.ids() == wanted


async def test_publish_in_order_of_an_oversize_event_raises_and_the_next_still_goes_out(bus: Bus) -> None:
    first = released(pod="first")
    bus.emit(first)
    with pytest.raises(EventRefused):
        await bus.publish_in_order(released_of_size(bus.nc.max_payload + 100))
    last = released(pod="last")
    await bus.publish_in_order(last)
    stored = Collector()
    await bus.route(DECISIONS, NODE, stored, deliver="all")
    await wait_until(lambda: len(stored.events) == 2, what="first and last")
    assert stored.ids() == [first.id, last.id]
    assert bus.stats.refused == 1


async def test_stream_refusing_an_event_is_permanent_not_an_outage(private_nats: NatsServerProcess) -> None:
    b = await Bus.connect(bus_settings(private_nats.url), source="t")
    try:
        await b.ensure_schema()
        config = schema.event_stream_config(b.settings)
        config.max_msg_size = 4096
        await b.js.update_stream(config)
        too_big = released_of_size(80_000)
        with pytest.raises(EventRefused, match="10054"):
            await b.publish(too_big)
        small = released()
        b.emit(released_of_size(90_000))
        b.emit(small)
        assert await b.flush(within_s=10)
        assert (b.stats.refused, b.stats.published) == (2, 1)
        assert (await b.js.stream_info(STREAM)).state.messages == 1
    finally:
        await b.close()
