"""The bus's own counters (:class:`BusStats`) as Prometheus counters ``gpubus_bus_<field>_total``.

Read when scraped (:class:`StatsCounters`), so the bus never touches a registry; each service
registers one in its own registry. It must not know which service it serves.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.bus.stats import BusStats
from shared.stats_metrics import StatsCounters

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


class BusStatsCollector(StatsCounters):
    """Counters read from ``stats()`` at each scrape; zeros while it returns None (not connected yet)."""

    def __init__(self, stats: Callable[[], BusStats | None]) -> None:
        def read() -> list[BusStats]:
            current = stats()
            return [] if current is None else [current]

        super().__init__(prefix=PREFIX, kind=BusStats, help=HELP, fallback="Bus counter", read=read)
