"""The bus's own counters (:class:`BusStats`) as Prometheus counters ``gpubus_bus_<field>_total``.

A custom collector that reads the counters when scraped, so the bus never touches a registry;
each service registers one in its own registry. It must not know which service it serves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.bus.stats import BusStats

PREFIX = "gpubus_bus_"

#: BusStats field -> help text; a test keeps it complete (a missing one falls back to the name).
HELP: dict[str, str] = {
    "published": "Events JetStream acknowledged (publish and emit)",
    "dropped": "Events the outbox dropped because it was full (NATS away too long) or closed",
    "refused": "Events NATS can never store (over max_payload, refused by the stream), dropped at once",
    "retries": "Outbox rounds that failed because NATS was unavailable and were retried",
    "decode_errors": "Messages consumers could not decode (logged, acked, skipped)",
    "handler_errors": "Handler failures (an event redelivered or given up, a request answered with an error)",
    "consumed": "Messages handled and acked",
    "disconnects": "Times the connection to NATS was lost",
    "reconnects": "Times the connection to NATS was re-established",
}


class BusStatsCollector(Collector):
    """Counters read from ``stats()`` at each scrape; zeros while it returns None (not connected yet),
    so every series exists from the first scrape."""

    def __init__(self, stats: Callable[[], BusStats | None]) -> None:
        self._stats = stats

    def describe(self) -> Iterator[Metric]:
        """The families without reading ``stats`` (the registry calls this on register)."""
        for name in _FIELDS:
            yield CounterMetricFamily(PREFIX + name, _help(name))

    def collect(self) -> Iterator[Metric]:
        current = self._stats() or BusStats()
        for name in _FIELDS:
            yield CounterMetricFamily(PREFIX + name, _help(name), value=getattr(current, name))


_FIELDS = tuple(f.name for f in dataclasses.fields(BusStats))


def _help(name: str) -> str:
    return HELP.get(name, f"Bus counter {name}")
