"""The event recorders' counters (:class:`RecorderStats`) as Prometheus counters
``gpubus_sim_events_<field>_total``.

Events are the stand-ins' cost, not gpubus's, and a recorder drops them quietly (queue full, spam
filter, given up): these counters say how many went which way. Read at each scrape
(:class:`StatsCounters`), summed over every recorder of the process (one per simulated kubelet),
so a recorder never touches a registry. It must not know which process serves it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpubus_local.sim.events import RecorderStats
from shared.stats_metrics import StatsCounters

PREFIX = "gpubus_sim_events_"

#: RecorderStats field -> help text; a test keeps it complete (a missing one falls back to the name).
HELP: dict[str, str] = {
    "created": "Events the simulated components created in the API server",
    "patched": "Repeated events written as a patch of the event they repeat (count, lastTimestamp, message)",
    "spam": "Events dropped by the spam filter (25 per source and object, then one per 5 minutes)",
    "dropped": "Events dropped because the recorder's queue was full (the API server far behind)",
    "failed": "Events given up: refused by the API server, unreachable on every try, or not built",
    "retries": "Event writes retried because the API server was unreachable",
}


class RecorderStatsCollector(StatsCounters):
    """Counters summed over ``recorders()`` at each scrape; zeros while there are none yet."""

    def __init__(self, recorders: Callable[[], Iterable[RecorderStats]]) -> None:
        super().__init__(prefix=PREFIX, kind=RecorderStats, help=HELP, fallback="Event recorder counter",
                         read=recorders)
