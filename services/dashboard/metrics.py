"""The dashboard's own counters as Prometheus metrics ``gpubus_dashboard_<field>_total``.

The handlers count on :class:`DashboardStats` (a plain dataclass); the registry reads it at each
scrape. Events folded and undecodable messages are read from the live view itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from shared.stats_metrics import StatsCounters

PREFIX = "gpubus_dashboard_"


@dataclass(slots=True)
class DashboardStats:
    events: int = 0
    undecodable: int = 0
    fold_errors: int = 0
    pages: int = 0
    not_found: int = 0
    bad_queries: int = 0
    pushes: int = 0
    streams_refused: int = 0
    replays: int = 0
    replay_failures: int = 0


HELP: dict[str, str] = {
    "events": "Events folded into the live view",
    "undecodable": "Stream messages that were no event (shown in the feed as undecodable, counted here)",
    "fold_errors": "Messages whose fold raised (a bug; logged, the view goes on)",
    "pages": "Page data built (requests and pushes; a page shared by several browsers counts once)",
    "not_found": "Requests for a node, card, pod or page the view does not hold (404)",
    "bad_queries": "Requests with a query parameter that cannot be read (400)",
    "pushes": "Page updates sent to browsers over server-sent events",
    "streams_refused": "Live page streams refused because max_streams were open (503)",
    "replays": "Time-travel views rebuilt from the stream",
    "replay_failures": "Time-travel replays that failed (NATS away, too slow; 503)",
}


def make_registry(read: Callable[[], DashboardStats], open_streams: Callable[[], int]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StatsCounters(prefix=PREFIX, kind=DashboardStats, help=HELP,
                                    fallback="Dashboard counter", read=lambda: [read()]))
    gauge = Gauge(f"{PREFIX}streams", "Browsers following a live page now", registry=registry)
    gauge.set_function(lambda: float(open_streams()))
    return registry
