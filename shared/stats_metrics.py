"""A component's own counters, kept in a plain dataclass, as Prometheus counters ``<prefix><field>_total``.

The component counts on its dataclass and never touches a registry; this collector reads the
counters when scraped (summed over every instance, as a process may hold many: one bus per
service, one event recorder per simulated kubelet), so every series exists from the first scrape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class StatsCounters(Collector):
    """One counter per int field of ``kind``; ``help`` names each (a test keeps it complete; a missing
    one falls back to ``"<fallback> <field>"``)."""

    def __init__(self, *, prefix: str, kind: type[Any], help: Mapping[str, str], fallback: str,
                 read: Callable[[], Iterable[Any]]) -> None:
        self._prefix = prefix
        self._help = help
        self._fallback = fallback
        self._read = read
        self._fields = tuple(f.name for f in dataclasses.fields(kind))

    def describe(self) -> Iterator[Metric]:
        """The families without reading the counters (the registry calls this on register)."""
        for name in self._fields:
            yield CounterMetricFamily(self._prefix + name, self._doc(name))

    def collect(self) -> Iterator[Metric]:
        totals = dict.fromkeys(self._fields, 0)
        for stats in self._read():
            for name in self._fields:
                totals[name] += getattr(stats, name)
        for name, value in totals.items():
            yield CounterMetricFamily(self._prefix + name, self._doc(name), value=value)

    def _doc(self, name: str) -> str:
        return self._help.get(name, f"{self._fallback} {name}")
