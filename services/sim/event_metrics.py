"""The event recorders' counters (:class:`RecorderStats`) as Prometheus counters
``gpubus_sim_events_<field>_total``.

Events are the stand-ins' cost, not gpubus's, and a recorder drops them quietly (queue full, spam
filter, given up): these counters say how many went which way. A custom collector reads them at
each scrape, summed over every recorder of the process (one per simulated kubelet), so a recorder
never touches a registry. It must not know which process serves it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from services.sim.events import RecorderStats

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


class RecorderStatsCollector(Collector):
    """Counters summed over ``recorders()`` at each scrape; zeros while there are none yet, so every
    series exists from the first scrape."""

    def __init__(self, recorders: Callable[[], Iterable[RecorderStats]]) -> None:
        self._recorders = recorders

    def describe(self) -> Iterator[Metric]:
        """The families without reading the stats (the registry calls this on register)."""
        for name in _FIELDS:
            yield CounterMetricFamily(PREFIX + name, _help(name))

    def collect(self) -> Iterator[Metric]:
        totals = dict.fromkeys(_FIELDS, 0)
        for stats in self._recorders():
            for name in _FIELDS:
                totals[name] += getattr(stats, name)
        for name, value in totals.items():
            yield CounterMetricFamily(PREFIX + name, _help(name), value=value)


_FIELDS = tuple(f.name for f in dataclasses.fields(RecorderStats))


def _help(name: str) -> str:
    return HELP.get(name, f"Event recorder counter {name}")
