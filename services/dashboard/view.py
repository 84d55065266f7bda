"""The cluster as the event stream tells it: a pure fold of events into a view (no I/O).

:meth:`ClusterView.apply` folds one decoded event in; :meth:`ClusterView.seed` starts from the
``inventory`` and ``allocations`` buckets. The same fold serves the live view and time travel
(a checkpoint or an empty view, then the stream's events up to the chosen moment), so both show
the same thing for the same events. Values inside the view are frozen and replaced, never
changed in place, so :meth:`ClusterView.copy` (a checkpoint) is a handful of dict copies.
Must not know NATS, HTTP or how the view is shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shared.events import (
    AllocationApplied,
    AllocationDecided,
    AllocationFailed,
    AllocationReleased,
    DeviceHealth,
    Event,
    Inventory,
    PodAdmitted,
    PodRejected,
    PodUnschedulable,
    Usage,
    UsageOverLimit,
)
from shared.model import Allocation, AllocationState, ContainerRequest, DeviceInfo

#: Events kept per card for its history page.
CARD_HISTORY = 40
#: Memory-used points kept per card (one per usage sample that names it).
CARD_SERIES = 60
#: Admissions kept while waiting for the pod they admitted to show up with a UID.
ADMISSIONS_KEPT = 4096
#: Finished pods kept at most, whatever the retention (a bound on memory).
FINISHED_KEPT = 50_000
#: Cluster events kept that may unblock a pending pod (releases, recoveries, new cards).
UNBLOCKING_KEPT = 200
#: A container's SM utilisation below this share of its card counts as idle.
IDLE_UTIL = 0.05

CLUSTER_WIDE = "cluster"
"""The trends' key for the whole cluster."""

PodKey = tuple[str, str]
"""(namespace, name): unique among live pods; the UID tells two pods of one name apart."""
SliceKey = tuple[str, str]
"""(container, card UUID): one container's slice of one card."""


class Phase(StrEnum):
    """A GPU pod's stage as the events tell it."""

    PENDING = "Pending"
    """Admitted, no placement yet (unschedulable reasons, if any, say why)."""
    RESERVED = "Reserved"
    """Slices held while the scheduler binds (a reservation in the ledger)."""
    STARTING = "Starting"
    """Bound to a node; the kubelet has not had every container allocated yet."""
    RUNNING = "Running"
    """Every GPU container got its devices (``allocation.applied`` complete)."""
    FAILED = "Failed"
    """The node refused its Allocate; the scheduler frees the slices."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    name: str
    devices: tuple[DeviceInfo, ...]
    seen_at: float
    """``ts`` of the newest inventory (heartbeats included)."""
    heartbeat_s: float = 30.0
    generation: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Admission:
    """What the webhook admitted under a name: not a pod yet (a ``generateName`` prefix, or a
    create the API server may still refuse), only the requests a pod of that name will carry."""

    requests: tuple[ContainerRequest | None, ...]
    ts: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PodState:
    """A pod as the API server and the ledger know it: it has a name and a UID."""

    namespace: str
    name: str
    uid: str
    created_at: float = 0.0
    """When it was first known: its admission under this name, else its first scheduler event."""
    placed_at: float = 0.0
    """When it was first placed (0: never)."""
    phase: Phase = Phase.PENDING
    allocation: Allocation | None = None
    requests: tuple[ContainerRequest | None, ...] = ()
    """Per container (init first) from ``pod.admitted``; None for a container without GPU."""
    reasons: Mapping[str, str] = field(default_factory=dict)
    """node -> why it does not fit, from the latest ``pod.unschedulable``."""
    reasons_at: float = 0.0
    failure: str = ""
    updated_at: float = 0.0

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodUse:
    """What a pod's containers use, by its newest usage sample, and the most they have used: one
    value per pod, replaced whole, so a checkpoint copies one dict however much is tracked."""

    used: Mapping[SliceKey, int]
    """Bytes used per slice."""
    util: Mapping[SliceKey, float]
    """SM utilisation 0..1 per slice."""
    peak: Mapping[SliceKey, tuple[int, float]]
    """The most bytes and SM utilisation each slice has shown."""
    idle_since: float = 0.0
    """``ts`` of the first sample of its current run under ``IDLE_UTIL`` (0: busy)."""


NO_USE = PodUse(used={}, util={}, peak={})


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedPod:
    """A pod whose slices were released: what it was given, where, what it used, how long it ran."""

    namespace: str
    name: str
    uid: str
    allocation: Allocation
    requests: tuple[ContainerRequest | None, ...]
    created_at: float
    placed_at: float
    ended_at: float
    why: str
    peak: Mapping[SliceKey, tuple[int, float]]
    """Per slice: the most bytes and the highest SM utilisation (0..1) any usage sample showed."""

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unblocking:
    """A cluster event that may let a pending pod fit: capacity freed, a card recovered or added."""

    ts: float
    kind: str
    node: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CardEvent:
    """One line of a card's history."""

    ts: float
    kind: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UsedPoint:
    ts: float
    used_mib: int


@dataclass(slots=True)
class ClusterView:
    """Nodes, pods, usage and per-card history, plus where in the stream the view stands."""

    nodes: dict[str, NodeState] = field(default_factory=dict)
    pods: dict[PodKey, PodState] = field(default_factory=dict)
    by_uid: dict[str, PodKey] = field(default_factory=dict)
    on_card: dict[str, frozenset[str]] = field(default_factory=dict)
    """Card UUID -> UIDs of the placed pods holding a slice of it."""
    given: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Card UUID -> (MiB, cores, slices) given out, kept as pods come and go (the overview reads
    8000 cards from here instead of walking every pod)."""
    used: dict[str, int] = field(default_factory=dict)
    """Card UUID -> bytes its pods use, by their newest usage samples."""
    health: dict[str, tuple[bool, str]] = field(default_factory=dict)
    """Card UUID -> (healthy, reason) from ``device.health``, newer than the inventory's flag."""
    usage: dict[str, PodUse] = field(default_factory=dict)
    """Pod UID -> what it uses, from its newest ``usage.sample`` (and the most it has used)."""
    card_util: dict[str, float] = field(default_factory=dict)
    """Card UUID -> SM utilisation 0..1 of the whole card (host sample, else its containers' sum)."""
    admissions: dict[PodKey, Admission] = field(default_factory=dict)
    finished: dict[PodKey, FinishedPod] = field(default_factory=dict)
    """Released pods, oldest release first, for ``finished_retention_s`` of stream time."""
    finished_retention_s: float = 86_400.0
    unblocking: tuple[Unblocking, ...] = ()
    over_limit: dict[str, float] = field(default_factory=dict)
    """Pod UID -> ``ts`` of its newest ``usage.over_limit``."""
    history: dict[str, tuple[CardEvent, ...]] = field(default_factory=dict)
    series: dict[str, tuple[UsedPoint, ...]] = field(default_factory=dict)
    seq: int = 0
    """Stream sequence of the newest event folded in (0: none)."""
    at: float = 0.0
    """Stream time of the newest event folded in (or of the seed)."""
    applied: int = 0
    undecodable: int = 0

    def copy(self) -> ClusterView:
        """A checkpoint: later folds into either leave the other as it was."""
        return ClusterView(**{f.name: _copied(getattr(self, f.name)) for f in dataclasses.fields(self)})

    # -- seeding ------------------------------------------------------------------------------
    def seed(self, inventories: Iterable[Inventory], allocations: Iterable[Allocation], at: float) -> None:
        """Start from the buckets' current entries (the state at ``at``)."""
        for inventory in inventories:
            self._inventory(inventory)
        for allocation in allocations:
            phase = _SEED_PHASE.get(allocation.state, Phase.STARTING)
            self._place(allocation, allocation.decided_at or at, phase)
        self.at = max(self.at, at)

    # -- the fold -----------------------------------------------------------------------------
    def apply(self, event: Event, seq: int = 0, at: float | None = None) -> None:
        """Fold one event in; ``seq``/``at`` are its stream sequence and time (default: its own ``ts``)."""
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)
        self.applied += 1
        self.seq = max(self.seq, seq)
        self.at = max(self.at, event.ts if at is None else at)

    def count_undecodable(self, seq: int = 0, at: float = 0.0) -> None:
        """A message that is no event still moves the view's place in the stream."""
        self.undecodable += 1
        self.seq = max(self.seq, seq)
        self.at = max(self.at, at)

    def _inventory(self, e: Inventory) -> None:
        old = self.nodes.get(e.node)
        if old is not None and old.generation == e.generation and old.devices == e.devices:
            self.nodes[e.node] = dataclasses.replace(old, seen_at=max(old.seen_at, e.ts))  # a heartbeat
            return
        self.nodes[e.node] = NodeState(name=e.node, devices=e.devices, seen_at=e.ts,
                                       heartbeat_s=e.heartbeat_s, generation=e.generation)
        for d in e.devices:  # a new inventory is the node's word on health until the next transition
            self.health.pop(d.id, None)
        if old is None or {d.id for d in old.devices} != {d.id for d in e.devices}:
            text = f"{len(e.devices)} cards, generation {e.generation}"
            self._note_node(e.node, e.ts, e.KIND, text)
            self._unblock(e.ts, e.KIND, e.node, f"{e.node}: {text}")

    def _health(self, e: DeviceHealth) -> None:
        self.health[e.uuid] = (e.healthy, e.reason)
        text = ("healthy" if e.healthy else "UNHEALTHY") + (f": {e.reason}" if e.reason else "")
        self._note(e.uuid, e.ts, e.KIND, text)
        if e.healthy:
            self._unblock(e.ts, e.KIND, e.node, f"{e.uuid} {text}")

    def _admitted(self, e: PodAdmitted) -> None:
        """Only remembered: a pod exists once the API server gave it a UID (a ``generateName``
        prefix is no pod, and the API server may still refuse the create)."""
        key = (e.namespace, e.name)
        self.admissions.pop(key, None)
        self.admissions[key] = Admission(requests=e.requests, ts=e.ts)
        while len(self.admissions) > ADMISSIONS_KEPT:
            del self.admissions[next(iter(self.admissions))]

    def _rejected(self, e: PodRejected) -> None:
        self.admissions.pop((e.namespace, e.name), None)

    def _unschedulable(self, e: PodUnschedulable) -> None:
        if not e.uid:
            return  # no pod without a UID
        key = (e.namespace, e.name)
        old = self.pods.get(key)
        if old is not None and old.uid != e.uid:
            self._forget_key(key)  # a new pod of the same name
            old = None
        if old is not None and old.allocation is not None:
            return  # an older verdict than the placement already folded in
        base = old or self._new_pod(e.namespace, e.name, e.uid, e.ts)
        self.pods[key] = dataclasses.replace(base, phase=Phase.PENDING, reasons=dict(e.reasons),
                                             reasons_at=e.ts, updated_at=e.ts)
        self.by_uid[e.uid] = key

    def _new_pod(self, namespace: str, name: str, uid: str, ts: float) -> PodState:
        """A pod first seen with its UID, with the requests of its admission under its name."""
        admission = self.admissions.pop((namespace, name), None)
        if admission is None:
            return PodState(namespace=namespace, name=name, uid=uid, created_at=ts)
        return PodState(namespace=namespace, name=name, uid=uid, requests=admission.requests,
                        created_at=min(admission.ts, ts))

    def _decided(self, e: AllocationDecided) -> None:
        a = e.allocation
        self._place(a, e.ts, Phase.RUNNING if a.state == AllocationState.APPLIED else Phase.STARTING)
        for uuid, mem, cores in _cards_of(a):
            self._note(uuid, e.ts, e.KIND, f"{a.namespace}/{a.name} {mem} MiB {cores}% on {a.node}")

    def _place(self, a: Allocation, ts: float, phase: Phase) -> None:
        key = (a.namespace, a.name)
        old = self.pods.get(key)
        if old is not None and old.uid != a.pod_uid:
            self._forget_key(key)  # a new pod of the same name
            old = None
        base = old or self._new_pod(a.namespace, a.name, a.pod_uid, ts)
        if base.allocation is not None:
            self._unindex(base.uid, base.allocation)
        self.pods[key] = dataclasses.replace(base, phase=phase, allocation=a, reasons={}, failure="",
                                             updated_at=ts, placed_at=base.placed_at or ts)
        self.by_uid[a.pod_uid] = key
        self.finished.pop(key, None)  # the live pod of that name is the one its page shows
        for uuid in {u for u, _, _ in _cards_of(a)}:
            self.on_card[uuid] = self.on_card.get(uuid, frozenset()) | {a.pod_uid}
        self._give(a, 1)

    def _applied(self, e: AllocationApplied) -> None:
        pod = self._pod(e.pod_uid, e.namespace, e.name)
        if pod is not None and pod.allocation is not None and e.complete:
            self.pods[pod.key] = dataclasses.replace(pod, phase=Phase.RUNNING, updated_at=e.ts)

    def _failed(self, e: AllocationFailed) -> None:
        pod = self._pod(e.pod_uid, e.namespace, e.name)
        if pod is not None:
            failed = dataclasses.replace(pod, phase=Phase.FAILED, failure=e.reason, updated_at=e.ts)
            self.pods[pod.key] = failed

    def _released(self, e: AllocationReleased) -> None:
        pod = self._pod(e.pod_uid, e.namespace, e.name)
        if pod is None or pod.uid != e.pod_uid:
            return
        if pod.allocation is not None:
            for uuid, mem, cores in _cards_of(pod.allocation):
                text = f"{pod.namespace}/{pod.name} {mem} MiB {cores}% freed ({e.why})"
                self._note(uuid, e.ts, e.KIND, text)
            freed = sum(m for _, m, _ in _cards_of(pod.allocation))
            self._unblock(e.ts, e.KIND, pod.allocation.node, f"{pod.namespace}/{pod.name} freed {freed} MiB "
                          f"on {pod.allocation.node} ({e.why})")
            self._finish(pod, pod.allocation, e)
        self._forget_key(pod.key)

    def _finish(self, pod: PodState, a: Allocation, e: AllocationReleased) -> None:
        self.finished.pop(pod.key, None)
        self.finished[pod.key] = FinishedPod(
            namespace=pod.namespace, name=pod.name, uid=pod.uid, allocation=a, requests=pod.requests,
            created_at=pod.created_at, placed_at=pod.placed_at or pod.updated_at, ended_at=e.ts,
            why=e.why, peak=self.usage.get(pod.uid, NO_USE).peak)
        horizon = e.ts - self.finished_retention_s
        while self.finished:
            oldest = next(iter(self.finished.values()))
            if oldest.ended_at >= horizon and len(self.finished) <= FINISHED_KEPT:
                break
            del self.finished[oldest.key]

    def _usage(self, e: Usage) -> None:
        per_pod: dict[str, dict[SliceKey, int]] = {}
        per_pod_util: dict[str, dict[SliceKey, float]] = {}
        card_util: dict[str, float] = {}
        for c in e.containers:
            slot = per_pod.setdefault(c.pod_uid, {})
            util = per_pod_util.setdefault(c.pod_uid, {})
            for d in c.devices:
                slot[(c.container, d.uuid)] = d.used_bytes
                util[(c.container, d.uuid)] = d.utilization
                card_util[d.uuid] = card_util.get(d.uuid, 0.0) + d.utilization
        for h in e.host:  # the card as a whole, where the monitor saw it
            card_util[h.uuid] = h.utilization
        for uid, used in per_pod.items():
            if uid in self.by_uid:  # usage of a pod already released is history, not a slice
                self._sample(uid, used, per_pod_util[uid], e.ts)
        node = self.nodes.get(e.node)
        if node is not None:
            for card in node.devices:
                self.card_util[card.id] = min(1.0, card_util.get(card.id, 0.0))
                self._point(card.id, e.ts)

    def _sample(self, uid: str, used: dict[SliceKey, int], util: dict[SliceKey, float], ts: float) -> None:
        old = self.usage.get(uid, NO_USE)
        peak = dict(old.peak)
        for k, b in used.items():
            top_b, top_u = peak.get(k, (0, 0.0))
            peak[k] = (max(top_b, b), max(top_u, util.get(k, 0.0)))
        idle = max(util.values(), default=0.0) < IDLE_UTIL
        self.usage[uid] = PodUse(used=used, util=util, peak=peak,
                                 idle_since=(old.idle_since or ts) if idle else 0.0)

    def _over_limit(self, e: UsageOverLimit) -> None:
        if e.pod_uid in self.by_uid:
            self.over_limit[e.pod_uid] = e.ts
        self._note(e.uuid, e.ts, e.KIND, f"{e.namespace}/{e.pod} {e.container} uses {e.used_bytes >> 20} MiB "
                                         f"of {e.limit_bytes >> 20} MiB")

    # -- helpers ------------------------------------------------------------------------------
    def _pod(self, uid: str, namespace: str, name: str) -> PodState | None:
        key = self.by_uid.get(uid) if uid else None
        return self.pods.get(key or (namespace, name))

    def _forget_key(self, key: PodKey) -> None:
        pod = self.pods.pop(key, None)
        if pod is not None and pod.allocation is not None:
            self._unindex(pod.uid, pod.allocation)
        if pod is not None:
            self.by_uid.pop(pod.uid, None)
            self.usage.pop(pod.uid, None)
            self.over_limit.pop(pod.uid, None)
            if pod.allocation is not None:
                cards = {u for u, _, _ in _cards_of(pod.allocation)}
                for uuid in cards & self.used.keys():
                    self.used[uuid] = used_bytes_on(self, uuid)
                for uuid in cards & self.card_util.keys():  # what is left of it until the next sample
                    self.card_util[uuid] = min(1.0, _util_on(self, uuid))

    def _unindex(self, uid: str, a: Allocation) -> None:
        self._give(a, -1)
        for uuid in {u for u, _, _ in _cards_of(a)}:
            left = self.on_card.get(uuid, frozenset()) - {uid}
            if left:
                self.on_card[uuid] = left
            else:
                self.on_card.pop(uuid, None)
                self.given.pop(uuid, None)
                self.used.pop(uuid, None)

    def _give(self, a: Allocation, sign: int) -> None:
        for uuid, mem, cores in _cards_of(a):
            m, c, n = self.given.get(uuid, (0, 0, 0))
            self.given[uuid] = (m + sign * mem, c + sign * cores, n + sign)

    def _note(self, uuid: str, ts: float, kind: str, text: str) -> None:
        self.history[uuid] = (*self.history.get(uuid, ())[-(CARD_HISTORY - 1):], CardEvent(ts=ts, kind=kind,
                                                                                           text=text))

    def _unblock(self, ts: float, kind: str, node: str, text: str) -> None:
        entry = Unblocking(ts=ts, kind=kind, node=node, text=text)
        self.unblocking = (*self.unblocking[-(UNBLOCKING_KEPT - 1):], entry)

    def _note_node(self, node: str, ts: float, kind: str, text: str) -> None:
        for d in self.nodes[node].devices:
            self._note(d.id, ts, kind, text)

    def _point(self, uuid: str, ts: float) -> None:
        used = used_bytes_on(self, uuid)
        if used or uuid in self.used:
            self.used[uuid] = used
        point = UsedPoint(ts=ts, used_mib=used >> 20)
        self.series[uuid] = (*self.series.get(uuid, ())[-(CARD_SERIES - 1):], point)


def _copied(value: Any) -> Any:
    """A field of a checkpoint: dicts copied (their values are frozen), everything else shared."""
    return dict(value) if isinstance(value, dict) else value


def used_bytes_on(view: ClusterView, uuid: str) -> int:
    """Bytes the pods placed on card ``uuid`` use on it, by their newest usage samples."""
    total = 0
    for uid in view.on_card.get(uuid, ()):
        for (_, card), used in view.usage.get(uid, NO_USE).used.items():
            if card == uuid:
                total += used
    return total


def _util_on(view: ClusterView, uuid: str) -> float:
    return sum(u for uid in view.on_card.get(uuid, ())
               for (_, card), u in view.usage.get(uid, NO_USE).util.items() if card == uuid)


def pods_on(view: ClusterView, uuid: str) -> list[PodState]:
    """Pods holding a slice of card ``uuid``, by name."""
    pods = (view.pods.get(view.by_uid.get(uid, ("", ""))) for uid in view.on_card.get(uuid, ()))
    return sorted((p for p in pods if p is not None), key=lambda p: p.key)


def _cards_of(a: Allocation) -> list[tuple[str, int, int]]:
    """(card UUID, MiB, cores) per container slice of an allocation."""
    return [(d.uuid, d.usedmem, d.usedcores) for slot in a.devices for d in slot]


def fold(events: Iterable[tuple[int, float, Event | None]], view: ClusterView | None = None) -> ClusterView:
    """Fold (stream sequence, stream time, event or None for an undecodable message) into a view."""
    view = view if view is not None else ClusterView()
    for seq, at, event in events:
        if event is None:
            view.count_undecodable(seq, at)
        else:
            view.apply(event, seq, at)
    return view


_SEED_PHASE = {AllocationState.RESERVED: Phase.RESERVED, AllocationState.DECIDED: Phase.STARTING,
               AllocationState.APPLIED: Phase.RUNNING, AllocationState.FAILED: Phase.FAILED}

_HANDLERS: dict[type[Event], Callable[[ClusterView, Any], None]] = {

    Inventory: ClusterView._inventory,
    DeviceHealth: ClusterView._health,
    PodAdmitted: ClusterView._admitted,
    PodRejected: ClusterView._rejected,
    PodUnschedulable: ClusterView._unschedulable,
    AllocationDecided: ClusterView._decided,
    AllocationApplied: ClusterView._applied,
    AllocationFailed: ClusterView._failed,
    AllocationReleased: ClusterView._released,
    Usage: ClusterView._usage,
    UsageOverLimit: ClusterView._over_limit,
}
