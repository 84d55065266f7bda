"""Which lower-priority pods would have to go for a pending pod to fit: the pure core of preemption.

kube-scheduler's own preemption cannot see card capacity (its dry run re-runs its filters, never an
extender's), so gpubus must name the victims itself. :func:`plan` answers from the scheduler's
state alone: nodes with their usage (:class:`NodeState`), the pods holding slices on them
(:class:`Resident`: a ledger entry and the pod's priority) and the pending pod with its priority.

Rules, in order:

- ``preemptionPolicy: Never`` preempts nothing; a pod that fits somewhere needs no victims.
- Only pods of strictly lower priority are candidates, never equal or higher.
- One card first: the fewest candidates holding a slice of one card whose eviction lets Fit place
  the pod on the node. Only when no single card can make room, one node: the fewest candidates on
  the node. Evicting a pod frees all of its slices, on every card it holds.
- Ties: the lowest highest victim priority, then the lowest priority sum, then names; across nodes
  the same, then the node name.
- Exact search over subsets, smallest first, within :data:`SEARCH_BUDGET` Fit runs per node;
  beyond it, lowest priority first until the pod fits, then every victim not needed is spared (a
  minimal set, maybe not the smallest).

PodDisruptionBudgets and graceful termination are the eviction's business, not this module's.
Pure: no I/O, no clocks; Fit is the scheduler's own (:func:`fit_pod`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations

from services.scheduler.fit import DEFAULT_POLICIES, NodeFit, NodeState, Policies, fit_pod
from shared.model import DeviceUUID, NodeName, PodDevices, PodRequest, PodUID

#: Fit runs one node's exact search may spend before it turns greedy.
SEARCH_BUDGET = 2048


class PreemptionPolicy(StrEnum):
    """``spec.preemptionPolicy`` (Kubernetes' default is ``PreemptLowerPriority``)."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resident:
    """A pod holding slices on a node: its ledger entry's devices and its priority."""

    uid: PodUID
    namespace: str
    name: str
    priority: int = 0
    devices: PodDevices
    init_count: int = 0

    @property
    def cards(self) -> frozenset[DeviceUUID]:
        return frozenset(d.uuid for slot in self.devices for d in slot)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """Room made on ``node``: evict ``victims`` (lowest priority first) and the pod fits as ``fit`` says."""

    node: NodeName
    card: DeviceUUID | None
    """The card every victim holds a slice of; None when the victims only share the node."""
    victims: tuple[Resident, ...]
    fit: NodeFit


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The chosen preemption (None: none helps), and why not, per node that has none."""

    best: Preemption | None
    per_node: Mapping[NodeName, Preemption | str]
    """Every node the pod does not fit as it is: its preemption, or why there is none."""
    reason: str = ""
    """Why no node gets one (empty when ``best`` is set)."""


FITS_ALREADY = "the pod fits without preemption"
NEVER = "preemptionPolicy is Never: the pod preempts no one"
NO_CANDIDATES = "no pod of lower priority holds a slice here"
NOT_ENOUGH = "evicting every pod of lower priority here is not enough"


def plan(
    nodes: Sequence[NodeState],
    residents: Mapping[NodeName, Sequence[Resident]],
    pod: PodRequest,
    priority: int,
    *,
    preemption_policy: str = PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    policies: Policies = DEFAULT_POLICIES,
) -> Plan:
    """Who would have to go, on which node and card, for ``pod`` (of ``priority``) to fit."""
    if any(fit_pod(n, pod, policies).fit for n in nodes):
        return Plan(best=None, per_node={}, reason=FITS_ALREADY)
    if preemption_policy == PreemptionPolicy.NEVER:
        return Plan(best=None, per_node={n.name: NEVER for n in nodes}, reason=NEVER)
    per_node = {n.name: on_node(n, residents.get(n.name, ()), pod, priority, policies) for n in nodes}
    found = [p for p in per_node.values() if isinstance(p, Preemption)]
    if not found:
        return Plan(best=None, per_node=per_node, reason="no node can make room by preemption")
    return Plan(best=min(found, key=_rank), per_node=per_node)


def on_node(
    node: NodeState,
    residents: Sequence[Resident],
    pod: PodRequest,
    priority: int,
    policies: Policies = DEFAULT_POLICIES,
) -> Preemption | str:
    """The best preemption on one node where ``pod`` does not fit as it is, or why there is none."""
    candidates = sorted((r for r in residents if r.priority < priority), key=_victim_order)
    if not candidates:
        return NO_CANDIDATES
    budget = [SEARCH_BUDGET]

    def fits(victims: Iterable[Resident]) -> NodeFit | None:
        budget[0] -= 1
        state = node
        for v in victims:
            state = state.without_pod(v.devices, v.init_count)
        nf = fit_pod(state, pod, policies)
        return nf if nf.fit else None

    if fits(candidates) is None:
        return NOT_ENOUGH
    by_card: dict[DeviceUUID, list[Resident]] = {}
    for r in candidates:
        for card in sorted(r.cards):
            by_card.setdefault(card, []).append(r)
    options = [
        _smallest(node.name, card, held, fits, budget)
        for card, held in sorted(by_card.items())
        if fits(held) is not None
    ]
    found = [o for o in options if o is not None]
    if found:
        return min(found, key=_rank)
    return _smallest(node.name, None, candidates, fits, budget) or NOT_ENOUGH


def _smallest(
    node: NodeName,
    card: DeviceUUID | None,
    candidates: list[Resident],
    fits: Callable[[Iterable[Resident]], NodeFit | None],
    budget: list[int],
) -> Preemption | None:
    """The fewest of ``candidates`` (whose eviction all together is known to be enough) that make room."""
    for size in range(1, len(candidates) + 1):
        best: Preemption | None = None
        for combo in combinations(candidates, size):
            if budget[0] <= 0:
                return best or _greedy(node, card, candidates, fits)
            nf = fits(combo)
            if nf is not None:
                found = Preemption(node=node, card=card, victims=combo, fit=nf)
                best = found if best is None or _rank(found) < _rank(best) else best
        if best is not None:
            return best
    return None


def _greedy(
    node: NodeName,
    card: DeviceUUID | None,
    candidates: list[Resident],
    fits: Callable[[Iterable[Resident]], NodeFit | None],
) -> Preemption | None:
    """Lowest priority first until the pod fits, then spare every victim it fits without."""
    chosen: list[Resident] = []
    for r in candidates:
        chosen.append(r)
        if fits(chosen) is not None:
            break
    for r in sorted(chosen, key=_victim_order, reverse=True):
        rest = [v for v in chosen if v is not r]
        if rest and fits(rest) is not None:
            chosen = rest
    nf = fits(chosen)
    return None if nf is None else Preemption(node=node, card=card, victims=tuple(chosen), fit=nf)


def _victim_order(r: Resident) -> tuple[int, str]:
    return r.priority, r.key


def _rank(p: Preemption) -> tuple[bool, int, int, int, tuple[str, ...], str]:
    priorities = [v.priority for v in p.victims]
    return (
        p.card is None,
        len(p.victims),
        max(priorities),
        sum(priorities),
        tuple(sorted(v.key for v in p.victims)),
        p.node,
    )
