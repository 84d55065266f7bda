"""Trends of memory and cores, allocated vs used, for the cluster, each node and each card (pure).

Every ``base_step_s`` of stream time the live view's cluster totals are sampled, and once a
minute (six base steps at most) every node's and card's (the view changes only by events, so
the state just before an event is the state at every boundary it crossed). Each :class:`Ring`
keeps the means of its samples over its own step in a fixed number of slots:
downsampled aggregates, never every sample, in ``float32`` arrays (8000 cards' last hour and
1000 nodes' last week fit in about 30 MiB). A page reads a range cut at any moment, which is
how charts travel in time. Must not know NATS, HTTP or how a chart is drawn.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from services.dashboard.view import CLUSTER_WIDE as CLUSTER
from services.dashboard.view import ClusterView

METRICS = ("mem_total", "mem_alloc", "mem_used", "cores_total", "cores_alloc", "cores_used")
"""Per sample: memory (MiB) and cores (percent of one card, summed over cards), total / allocated / used."""
WIDTH = len(METRICS)
NAN = float("nan")
_MIB = 1 << 20


class Range(StrEnum):
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"


RANGE_S = {Range.HOUR: 3600.0, Range.DAY: 86_400.0, Range.WEEK: 604_800.0}


class Scope(StrEnum):
    CLUSTER = "cluster"
    NODE = "node"
    CARD = "card"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    scope: Scope
    range: Range
    step_s: float

    @property
    def points(self) -> int:
        return max(1, math.ceil(RANGE_S[self.range] / self.step_s))


def tiers(base_step_s: float) -> tuple[Tier, ...]:
    """The rings kept: the cluster's last hour at the base step; nodes' last hour and cards' at six
    base steps (a minute at the default 10 s), their day at 5 minutes and week at 30 (nodes only)."""
    minute = min(60.0, 6 * base_step_s)
    return (Tier(scope=Scope.CLUSTER, range=Range.HOUR, step_s=base_step_s),
            Tier(scope=Scope.CLUSTER, range=Range.DAY, step_s=max(300.0, base_step_s)),
            Tier(scope=Scope.CLUSTER, range=Range.WEEK, step_s=max(1800.0, base_step_s)),
            Tier(scope=Scope.NODE, range=Range.HOUR, step_s=minute),
            Tier(scope=Scope.NODE, range=Range.DAY, step_s=max(300.0, base_step_s)),
            Tier(scope=Scope.NODE, range=Range.WEEK, step_s=max(1800.0, base_step_s)),
            Tier(scope=Scope.CARD, range=Range.HOUR, step_s=minute))


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """One chart's data: slot start times and per metric the mean over each slot (None: no sample)."""

    range: Range
    step_s: float
    t: list[float]
    values: dict[str, list[float | None]]


CardRow = tuple[str, str, tuple[float, ...]]
"""(card UUID, node, the six metrics)."""


class Ring:
    """One tier: slot times shared by its scopes, one array of ``points x WIDTH`` floats per scope."""

    def __init__(self, tier: Tier) -> None:
        self.tier = tier
        self.times = array("d", [NAN] * tier.points)
        self.values: dict[str, array[float]] = {}
        self._sums: dict[str, list[float]] = {}
        self._count = 0
        self._bucket = -1

    def add(self, t: float, samples: Iterable[tuple[str, tuple[float, ...]]]) -> None:
        """Fold one base sample taken at ``t`` in; a slot is written when ``t`` leaves its bucket."""
        bucket = math.floor(t / self.tier.step_s)
        if bucket != self._bucket and self._count:
            self._write()
        self._bucket = bucket
        self._count += 1
        sums = self._sums
        for key, values in samples:
            acc = sums.get(key)
            if acc is None:
                sums[key] = list(values)
            else:
                for i in range(WIDTH):
                    acc[i] += values[i]

    def _write(self) -> None:
        points = self.tier.points
        slot = self._bucket % points
        self.times[slot] = self._bucket * self.tier.step_s
        at = slot * WIDTH
        for key, row in self.values.items():
            if key not in self._sums:
                row[at:at + WIDTH] = array("f", [NAN] * WIDTH)
        for key, acc in self._sums.items():
            row = self.values.get(key) or self.values.setdefault(key, array("f", [NAN] * (points * WIDTH)))
            row[at:at + WIDTH] = array("f", [v / self._count for v in acc])
        self._sums = {}
        self._count = 0

    def read(self, key: str, until: float) -> Series:
        """Slots starting in (until - range, until], oldest first."""
        row = self.values.get(key)
        since = until - RANGE_S[self.tier.range]
        order = sorted((t, i) for i, t in enumerate(self.times) if since < t <= until)
        values: dict[str, list[float | None]] = {m: [] for m in METRICS}
        for _, i in order:
            for j, m in enumerate(METRICS):
                v = NAN if row is None else row[i * WIDTH + j]
                values[m].append(None if math.isnan(v) else round(v, 1))
        return Series(range=self.tier.range, step_s=self.tier.step_s, t=[t for t, _ in order], values=values)


class Trends:
    """Every ring, fed from the live view at each base step of stream time."""

    def __init__(self, base_step_s: float = 10.0) -> None:
        self.base_step_s = base_step_s
        self.rings = {(t.scope, t.range): Ring(t) for t in tiers(base_step_s)}
        self.minute_s = self.rings[(Scope.NODE, Range.HOUR)].tier.step_s
        """Nodes and cards are sampled once per this step (a minute at the default base step): their
        8000 rows per sample are what costs."""
        self._minute = -1
        self._next = 0.0
        self.samples = 0

    def advance(self, view: ClusterView, until: float) -> None:
        """Sample ``view`` at every base boundary up to ``until`` (the view holds until then)."""
        if self._next == 0.0:
            self._next = (math.floor(until / self.base_step_s) + 1) * self.base_step_s
            return
        if until < self._next:
            return
        longest = RANGE_S[Range.WEEK]
        if until - self._next > longest:  # a long silence: only the last week can still be shown
            self._next += math.floor((until - self._next - longest) / self.base_step_s) * self.base_step_s
        cards = list(card_samples(view))
        cluster = total(row for _, _, row in cards)
        nodes: dict[str, tuple[float, ...]] | None = None
        while self._next <= until:
            self.samples += 1
            for (scope, _), ring in self.rings.items():
                if scope is Scope.CLUSTER:
                    ring.add(self._next, ((CLUSTER, cluster),))
            minute = math.floor(self._next / self.minute_s)
            if minute != self._minute:  # nodes and cards: one sample a minute, the first in it
                self._minute = minute
                nodes = nodes if nodes is not None else node_samples(view, cards)
                self._sample_scoped(self._next, nodes, cards)
            self._next += self.base_step_s

    def _sample_scoped(self, t: float, nodes: dict[str, tuple[float, ...]], cards: list[CardRow]) -> None:
        for (scope, _), ring in self.rings.items():
            if scope is Scope.NODE:
                ring.add(t, nodes.items())
            elif scope is Scope.CARD:
                ring.add(t, ((uuid, row) for uuid, _, row in cards))

    def series(self, scope: Scope, key: str, wanted: Range, until: float) -> Series:
        """The chart of ``key`` (CLUSTER, a node, a card) over ``wanted`` up to ``until``; a card's
        longest range is its last hour."""
        ring = self.rings.get((scope, wanted)) or self.rings[(scope, Range.HOUR)]
        return ring.read(key, until)


def card_samples(view: ClusterView) -> Iterator[CardRow]:
    """(card UUID, node, the six metrics) of every card now."""
    for node in view.nodes.values():
        for d in node.devices:
            mem, cores, _ = view.given.get(d.id, (0, 0, 0))
            yield d.id, node.name, (float(d.devmem), float(mem), view.used.get(d.id, 0) / _MIB,
                                    float(d.devcore), float(cores), 100.0 * view.card_util.get(d.id, 0.0))


def node_samples(view: ClusterView, cards: list[CardRow]) -> dict[str, tuple[float, ...]]:
    per_node: dict[str, list[float]] = {}
    for _, node, row in cards:
        acc = per_node.get(node)
        if acc is None:
            per_node[node] = list(row)
        else:
            for i in range(WIDTH):
                acc[i] += row[i]
    return {n: tuple(v) for n, v in per_node.items()}


def total(rows: Iterable[tuple[float, ...]]) -> tuple[float, ...]:
    acc = [0.0] * WIDTH
    for row in rows:
        for i in range(WIDTH):
            acc[i] += row[i]
    return tuple(acc)


def series_json(s: Series) -> dict[str, object]:
    return {"range": s.range.value, "step_s": s.step_s, "t": s.t, **s.values}
