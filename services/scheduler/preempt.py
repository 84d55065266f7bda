"""Which lower-priority pods would have to go for a pending pod to fit: the pure core of preemption.

kube-scheduler's own preemption cannot see card capacity (its dry run re-runs its filters, never an
extender's), so gpubus must name the victims itself. :func:`plan` answers from the scheduler's
state alone: nodes with their usage (:class:`NodeState`), the pods holding slices on them
(:class:`Resident`: a ledger entry and the pod's priority) and the pending pod with its priority.

Rules, in order:

- ``preemptionPolicy: Never`` preempts nothing; a pod that fits somewhere needs no victims.
- Only pods of strictly lower priority are candidates, never equal or higher, never the pod itself
  (a slice the ledger holds for it while it waits).
- One card first: the fewest candidates holding a slice of one card whose eviction lets Fit place
  the pod on the node. Only when no single card can make room, one node: the fewest candidates on
  the node. Evicting a pod frees all of its slices, on every card it holds.
- Ties: the lowest highest victim priority, then the lowest priority sum, then names; across nodes
  the same, then the node name.
- Exact search over subsets, smallest first, within :data:`SEARCH_BUDGET` per node and
  :data:`PLAN_BUDGET` per plan; beyond them, lowest priority first until the pod fits, then every
  victim not needed is spared (a minimal set, maybe not the smallest). Sets that leave the node's
  usage the same (pods of one shape) share one Fit run.

PodDisruptionBudgets and graceful termination are the eviction's business, not this module's.
Pure: no I/O, no clocks; Fit is the scheduler's own (:func:`fit_pod`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations

from services.scheduler.fit import DEFAULT_POLICIES, NodeFit, NodeState, Policies, filter_nodes, fit_pod
from services.scheduler.nodestate import release_collapsed
from shared.annotations import collapse_usage
from shared.model import DeviceUsage, DeviceUUID, NodeName, PodDevices, PodRequest, PodUID

#: What one node's exact search may spend before it turns greedy: a Fit run costs 64 (about 50-100 us
#: on a node of 8 cards), a set of victims whose shapes were judged already 1 (a few us).
SEARCH_BUDGET = 16384
#: What the exact searches of one plan may spend together; past it every node is searched greedily.
PLAN_BUDGET = 131072
_RUN, _SEEN = 64, 1


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
    if filter_nodes(nodes, pod, policies, choose=False).fits:
        return Plan(best=None, per_node={}, reason=FITS_ALREADY)
    if preemption_policy == PreemptionPolicy.NEVER:
        return Plan(best=None, per_node={n.name: NEVER for n in nodes}, reason=NEVER)
    left = [PLAN_BUDGET]
    per_node = {
        n.name: on_node(n, residents.get(n.name, ()), pod, priority, policies, shared_budget=left)
        for n in nodes
    }
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
    *,
    shared_budget: list[int] | None = None,
) -> Preemption | str:
    """The best preemption on one node where ``pod`` does not fit as it is, or why there is none.

    ``shared_budget`` (one mutable count) is what the exact searches of a whole plan may still spend.
    """
    candidates = sorted(
        (r for r in residents if r.priority < priority and r.uid != pod.uid), key=_victim_order
    )
    if not candidates:
        return NO_CANDIDATES
    shared = shared_budget if shared_budget is not None else [PLAN_BUDGET]
    budget = [min(SEARCH_BUDGET, shared[0])]
    usage = node.usage_map()
    held = {r.uid: collapse_usage(r.devices, r.init_count) for r in candidates}

    # pods of one shape free the same usage: a set is judged by the multiset of its victims' shapes
    shapes: dict[tuple[tuple[DeviceUUID, DeviceUsage], ...], int] = {}
    shape = {r.uid: shapes.setdefault(tuple(sorted(held[r.uid].items())), len(shapes)) for r in candidates}
    judged: dict[tuple[int, ...], bool] = {}

    def without(victims: Iterable[Resident]) -> NodeState:
        freed = release_collapsed(usage, (held[v.uid] for v in victims))
        return NodeState.from_usage(node.name, node.devices, freed, node.annotations)

    def fits(victims: Iterable[Resident]) -> bool:
        chosen = list(victims)
        key = tuple(sorted(shape[v.uid] for v in chosen))
        answer = judged.get(key)
        cost = _SEEN if answer is not None else _RUN
        budget[0] -= cost
        shared[0] -= cost
        if answer is None:
            answer = judged[key] = bool(filter_nodes([without(chosen)], pod, policies, choose=False).fits)
        return answer

    if not fits(candidates):
        return NOT_ENOUGH
    by_card: dict[DeviceUUID, list[Resident]] = {}
    for r in candidates:
        for card in sorted(r.cards):
            by_card.setdefault(card, []).append(r)
    found = [
        option
        for card, on_card in sorted(by_card.items())
        if fits(on_card) and (option := _smallest(card, on_card, fits, budget)) is not None
    ]
    best = min(found, key=_victim_rank) if found else _smallest(None, candidates, fits, budget)
    if best is None:
        return NOT_ENOUGH
    fit = fit_pod(without(best[1]), pod, policies)
    return Preemption(node=node.name, card=best[0], victims=best[1], fit=fit)


_Victims = tuple[DeviceUUID | None, tuple[Resident, ...]]


def _smallest(
    card: DeviceUUID | None,
    candidates: list[Resident],
    fits: Callable[[Iterable[Resident]], bool],
    budget: list[int],
) -> _Victims | None:
    """The fewest of ``candidates`` (whose eviction all together is known to be enough) that make room."""
    for size in range(1, len(candidates) + 1):
        best: _Victims | None = None
        for combo in combinations(candidates, size):
            if budget[0] <= 0:
                return best or _greedy(card, candidates, fits)
            if fits(combo) and (best is None or _victim_rank((card, combo)) < _victim_rank(best)):
                best = (card, combo)
        if best is not None:
            return best
    return None


def _greedy(
    card: DeviceUUID | None, candidates: list[Resident], fits: Callable[[Iterable[Resident]], bool]
) -> _Victims | None:
    """Lowest priority first until the pod fits, then spare every victim it fits without."""
    chosen: list[Resident] = []
    for r in candidates:
        chosen.append(r)
        if fits(chosen):
            break
    else:
        return None
    for r in sorted(chosen, key=_victim_order, reverse=True):
        rest = [v for v in chosen if v is not r]
        if rest and fits(rest):
            chosen = rest
    return card, tuple(chosen)


def _victim_order(r: Resident) -> tuple[int, str]:
    return r.priority, r.key


def _victim_rank(found: _Victims) -> tuple[bool, int, int, int, tuple[str, ...]]:
    card, victims = found
    priorities = [v.priority for v in victims]
    return card is None, len(victims), max(priorities), sum(priorities), tuple(sorted(v.key for v in victims))


def _rank(p: Preemption) -> tuple[tuple[bool, int, int, int, tuple[str, ...]], str]:
    return _victim_rank((p.card, p.victims)), p.node
