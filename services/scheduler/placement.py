"""Placement: the extender's three questions answered from the ledger with the Fit engine.

``filter`` (which of these nodes can take the pod, and why not the others), ``scores`` (0-10 per
node by node policy) and ``decide`` (the devices on the node kube-scheduler picked). Both filter
and decide pass the pod's namespace ResourceQuota, with the namespace's usage from the ledger,
into Fit (``ResourceQuotaNotFit``). Nodes without
inventory or with a stale heartbeat are refused with a clear reason before Fit runs. Fit's
immutable ``NodeState`` is cached per node and dropped when the ledger reports the node changed,
so a filter call costs one dict lookup per node that did not change.

Pure: no I/O, no clock reads (``now`` is passed in). Must not know HTTP, NATS or Kubernetes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from services.scheduler.fit import NodeFit, NodeState, Policies, Quota, filter_nodes, fit_pod
from services.scheduler.ledger import STALE_HEARTBEATS, Ledger
from services.scheduler.quota import NO_QUOTA, NamespaceQuota, fit_quota
from services.scheduler.reasons import NODE_UNREGISTERED
from services.scheduler.score import NodePolicy, best_node
from shared import annotations as ann
from shared.model import NodeName, PodRequest

#: ``quotas(namespace)``: the namespace's GPU ResourceQuota as last read (must not block).
QuotaLookup = Callable[[str], NamespaceQuota]

#: Reason reported for a node whose inventory heartbeat stopped.
STALE_PREFIX = "node inventory stale"
#: Extender scores run 0..10 (``MaxExtenderPriority``); Fit's node score runs 0..30.
MAX_EXTENDER_SCORE = 10
_NODE_SCORE_MAX = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterOutcome:
    """Fitting nodes (best first in single-node mode, input order otherwise) and why the rest failed."""

    passed: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    """Nodes Fit rejected, with HAMi's ``"N/M Reason"`` strings."""
    unresolvable: dict[str, str] = field(default_factory=dict)
    """Nodes we cannot judge at all (no inventory, stale heartbeat); preemption cannot help them."""
    reason_counts: dict[str, int] = field(default_factory=dict)
    """Reason name -> how many failed nodes reported it (for metrics)."""


class _Cached:
    """A node's immutable Fit state, the time its inventory turns stale (refreshed on expiry), and
    its binpack extender score (request-independent, so /prioritize reads it, once per state)."""

    __slots__ = ("binpack", "stale_at", "state")

    def __init__(self, state: NodeState, stale_at: float) -> None:
        self.state = state
        self.stale_at = stale_at
        scaled = min(state.derived.score, _NODE_SCORE_MAX) / _NODE_SCORE_MAX * MAX_EXTENDER_SCORE
        self.binpack = round(scaled)


class Placement:
    """Filter, score and decide over a :class:`Ledger`; holds only a per-node cache.

    The cache is emptied per node from the ledger's change feed, so a filter call costs one dict
    lookup and one comparison per unchanged node; heartbeats (which only move a node's stale
    deadline later) are picked up lazily when a cached deadline passes.
    """

    def __init__(
        self,
        ledger: Ledger,
        policies: Policies,
        *,
        single_node: bool = False,
        quotas: QuotaLookup = lambda namespace: NO_QUOTA,
        memory_factor: int = 1,
    ) -> None:
        self.ledger = ledger
        self.policies = policies
        self.single_node = single_node
        self._quotas = quotas
        self._memory_factor = memory_factor
        self._cache: dict[str, _Cached] = {}
        self._changed = ledger.change_feed()

    def quota_for(self, pod: PodRequest) -> Quota | None:
        """The pod's namespace quota with what the namespace's other pods use (None: not enforced)."""
        limits = self._quotas(pod.namespace)
        if not limits.enforced:
            return None
        return fit_quota(
            limits,
            self.ledger.namespace_usage(pod.namespace),
            self.ledger.pod_usage(pod.uid),
            self._memory_factor,
        )

    def _sync(self) -> None:
        if self._changed:
            cache = self._cache
            for node in self._changed:
                cache.pop(node, None)
            self._changed.clear()

    def _resolve(self, node: NodeName, now: float) -> NodeState | str:
        """The node's state (cached), or why it cannot be judged; the slow path of every lookup."""
        inv = self.ledger.inventory(node)
        if inv is None:
            return NODE_UNREGISTERED
        if inv.stale(now):
            return (
                f"{STALE_PREFIX}: no heartbeat for {now - inv.seen_at:.0f}s "
                f"(expected every {inv.heartbeat_s:.0f}s, stale after {STALE_HEARTBEATS:.0f} missed)"
            )
        cached = self._cache.get(node)
        if cached is None:
            snap = self.ledger.snapshot(node)
            assert snap is not None  # inventory is there
            state = NodeState(name=node, devices=snap.devices, usage=snap.usage, annotations=snap.annotations)
            cached = self._cache[node] = _Cached(state, inv.stale_at)
        else:
            cached.stale_at = inv.stale_at
        return cached.state

    def _lookup(self, name: str, now: float) -> NodeState | str:
        cached = self._cache.get(name)
        if cached is not None and now <= cached.stale_at:
            return cached.state
        return self._resolve(NodeName(name), now)

    def node_state(self, node: NodeName) -> NodeState | None:
        """The node's Fit state whatever its heartbeat; None if it has no inventory."""
        self._sync()
        if self.ledger.inventory(node) is None:
            return None
        found = self._resolve(node, -math.inf)
        return found if isinstance(found, NodeState) else None

    def unusable(self, node: NodeName, now: float) -> str | None:
        """Why a node cannot be judged (no inventory, stale heartbeat), or None."""
        self._sync()
        found = self._lookup(node, now)
        return found if isinstance(found, str) else None

    def filter(self, pod: PodRequest, names: Sequence[str], now: float) -> FilterOutcome:
        """Every node that fits (raises AnnotationError on bad scoring weights)."""
        self._sync()
        states: list[NodeState] = []
        unresolvable: dict[str, str] = {}
        cache = self._cache
        for name in names:
            # the hot loop of /filter: one dict lookup per node whose state and heartbeat hold
            cached = cache.get(name)
            if cached is not None and now <= cached.stale_at:
                states.append(cached.state)
                continue
            found = self._resolve(NodeName(name), now)
            if isinstance(found, str):
                unresolvable[name] = found
            else:
                states.append(found)
        result = filter_nodes(states, pod, self.policies, self.quota_for(pod), choose=False)
        passed: list[str] = [n for n, _ in result.fits]
        if self.single_node and passed:
            passed = [best_node(result.fits, result.policy) or passed[0]]
        if len(passed) == len(states):
            return FilterOutcome(passed=passed, unresolvable=unresolvable)
        fits = result.failed_fits()
        counts: dict[str, int] = {}
        for nf in fits.values():
            for reason, n in nf.reasons.items():
                if n > 0:
                    counts[reason] = counts.get(reason, 0) + 1
        return FilterOutcome(
            passed=passed,
            failed={n: f.reason for n, f in fits.items()},
            unresolvable=unresolvable,
            reason_counts=counts,
        )

    def scores(
        self, pod: PodRequest, names: Sequence[str], now: float, favour: str | None = None
    ) -> list[tuple[str, int]]:
        """0..10 per node: binpack prefers fuller nodes, spread emptier ones; unusable nodes score 0.

        ``favour`` (where filter left the pod's provisional slice) alone scores 10, the others at
        most 9 in their order: 0..10 ties many nodes, kube-scheduler breaks ties at random, and a
        bind to another node than the one holding the slice may find it full and go round again.
        """
        scored = self._scored(pod, names, now)
        if favour is None or favour not in names:
            return list(scored)
        top = MAX_EXTENDER_SCORE
        return [(name, top if name == favour else min(score, top - 1)) for name, score in scored]

    def first_choice(self, pod: PodRequest, names: Sequence[str], now: float) -> str:
        """The node :meth:`scores` ranks highest (the first of equals); ``names`` must not be empty."""
        if len(names) == 1:
            return names[0]
        return max(self._scored(pod, names, now), key=_score)[0]

    def _scored(self, pod: PodRequest, names: Sequence[str], now: float) -> Iterator[tuple[str, int]]:
        policy = pod.annotations.get(ann.NODE_SCHEDULER_POLICY) or self.policies.node
        spread = policy == NodePolicy.SPREAD
        self._sync()
        cache = self._cache
        for name in names:
            cached = cache.get(name)
            if cached is None or now > cached.stale_at:
                if isinstance(self._resolve(NodeName(name), now), str):
                    yield name, 0
                    continue
                cached = cache[name]
            yield name, MAX_EXTENDER_SCORE - cached.binpack if spread else cached.binpack

    def decide(self, pod: PodRequest, node: NodeName, now: float) -> NodeFit:
        """Fit on the chosen node against current usage; ``fit`` False carries the reason."""
        self._sync()
        state = self._lookup(node, now)
        if isinstance(state, str):
            return NodeFit(node=node, fit=False, score=0.0, reason=state)
        return fit_pod(state, pod, self.policies, self.quota_for(pod))


def _score(scored: tuple[str, int]) -> int:
    return scored[1]
