"""The webhook's bus link while NATS is away: emit never blocks, the buffer is bounded, drops are counted.

Cases: events within the bound wait in order; past the bound the oldest go and are counted (by the
link and by ``gpubus_webhook_bus_outbox_dropped_total``); the default bound is the bus's outbox
limit; a link started against a dead NATS closes promptly and reports ``connecting``.
"""

from __future__ import annotations

from natsproc import free_port
from prometheus_client import generate_latest

from services.webhook.buslink import BusLink
from services.webhook.metrics import WebhookMetrics
from shared.bus import BusSettings
from shared.events import PodRejected


def dead_nats(**kw: object) -> BusSettings:
    return BusSettings(url=f"nats://127.0.0.1:{free_port()}", reconnect_wait_s=0.1, **kw)  # type: ignore[arg-type]


def rejected(i: int) -> PodRejected:
    return PodRejected(namespace="ns", name=f"p{i}", reason="no", source="webhook")


def test_events_past_the_bound_drop_the_oldest_and_are_counted() -> None:
    link = BusLink(dead_nats(), source="webhook", pending_limit=3)
    metrics = WebhookMetrics(dropped_events=lambda: link.dropped)
    for i in range(5):
        link.emit(rejected(i))
    assert link.dropped == 2
    assert "gpubus_webhook_bus_outbox_dropped_total 2.0" in generate_latest(metrics.registry).decode()


def test_the_buffer_bound_defaults_to_the_bus_outbox_limit() -> None:
    link = BusLink(dead_nats(outbox_limit=4), source="webhook")
    for i in range(6):
        link.emit(rejected(i))
    assert link.dropped == 2


async def test_a_link_to_a_dead_nats_reports_connecting_and_closes() -> None:
    link = BusLink(dead_nats(), source="webhook")
    link.start()
    link.emit(rejected(0))
    assert (link.state, link.connected, link.dropped) == ("connecting", False, 0)
    await link.close()
