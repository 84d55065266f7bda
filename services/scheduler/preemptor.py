"""Preemption for shared GPUs, wired: the leader evicts the victims :mod:`preempt` names and holds the room.

kube-scheduler's own preemption cannot see cards: its dry run re-runs its filter plugins, never an
extender, so a pod refused only for a card's memory, cores or slots gets no victims from it (it
finds candidates with no victims and drops them). The leader therefore follows ``pod.unschedulable``
(every replica's filter publishes it) and, for a pod of higher priority that fits nowhere:

1. plans from the ledger (:func:`preempt.plan`: fewest strictly-lower-priority pods on one card,
   then one node; ``preemptionPolicy: Never`` preempts no one),
2. asks the API server to evict each victim through the Eviction API, first as a dry run (a
   PodDisruptionBudget that forbids it answers 429): a refused victim is spared and the plan made
   again without it; when no plan is left the pod waits (its next refusal tries again),
3. sets the pod's ``status.nominatedNodeName``, publishes ``pod.preempted`` per victim and records
   a Kubernetes Event on both pods,
4. holds the room: as each victim's entry leaves the ledger its slices are reserved again under a
   placeholder, and once all are gone the pod's own slice is reserved, until it binds or
   :attr:`hold_s` passes. kube-scheduler clears a nomination on its next failed cycle (a pod
   evicted through the Eviction API is not "terminating by preemption" to it), so the nomination
   alone would not keep other pods out of the freed room.

Must not know HTTP; the Kubernetes calls go through :class:`PreemptionApi`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from services.scheduler.explain import pod_priority
from services.scheduler.fit import NodeState
from services.scheduler.ledger import Ledger
from services.scheduler.placement import Placement
from services.scheduler.preempt import Plan, Preemption, PreemptionPolicy, Resident, plan
from services.scheduler.requeue import REQUEUE_ANNOTATION
from shared.errors import BadInput, RequestError
from shared.events import Event, PodPreempted, PodUnschedulable
from shared.kube import KubeClient, _pod_path
from shared.kube_errors import KubeError, NotFound
from shared.model import Allocation, AllocationState, NodeName, PodRequest, PodUID
from shared.requests import DEFAULT_NAMES, ResourceNames, pod_request

log = logging.getLogger(__name__)

#: How long the freed room is held for the pod (its victims' graceful termination included).
HOLD_S = 120.0
#: Plans tried per refusal before the pod waits (each spares the victims a PDB protected).
ATTEMPTS = 4
#: Placeholder reservations are named after this and the victim's UID.
PLACEHOLDER = "gpubus-preemption-hold/"
#: The component Kubernetes Events name.
COMPONENT = "gpubus-scheduler"


class EvictionRefused(Exception):
    """The API server would not evict the pod now (a PodDisruptionBudget; HTTP 429)."""


class PreemptionApi(Protocol):
    """The Kubernetes calls preemption makes (:class:`KubePreemptionApi` on a real API server)."""

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    async def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> None: ...
    async def nominate(self, namespace: str, name: str, node: str) -> None: ...
    async def requeue(self, namespace: str, name: str, stamp: str) -> None: ...
    async def record(
        self, pod: Mapping[str, Any], reason: str, message: str, kind: str = "Normal"
    ) -> None: ...


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...


@dataclass(slots=True, kw_only=True)
class Hold:
    """Room made on ``node`` for ``pod``: its victims' entries, the placeholders taken as they left."""

    pod: PodRequest
    node: NodeName
    victims: dict[PodUID, Allocation]
    expires_at: float
    placeholders: set[PodUID] = field(default_factory=set)
    reserved: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one preemption attempt did (for logs, metrics and tests)."""

    action: str
    """``preempted``, ``no_plan``, ``never``, ``not_pending``, ``held``, ``gone`` or ``failed``."""
    node: str = ""
    victims: tuple[str, ...] = ()
    spared: tuple[str, ...] = ()
    """Victims a PodDisruptionBudget protected (tried, refused, left running)."""
    reason: str = ""


class Preemptor:
    """The leader's preemption: :meth:`on_event` per ``pod.unschedulable``, :meth:`on_change` per
    ledger change."""

    def __init__(
        self,
        *,
        placement: Placement,
        api: PreemptionApi | None,
        events: EventSink,
        leadership: Leadership,
        clock: Callable[[], float] = time.time,
        names: ResourceNames = DEFAULT_NAMES,
        hold_s: float = HOLD_S,
        on_outcome: Callable[[Outcome], None] = lambda outcome: None,
    ) -> None:
        self._placement = placement
        self._ledger: Ledger = placement.ledger
        self._api = api
        self._events = events
        self._leadership = leadership
        self._clock = clock
        self._names = names
        self.hold_s = hold_s
        self._on_outcome = on_outcome
        self.holds: dict[PodUID, Hold] = {}
        self._priorities: dict[str, int] = {}
        """Pod UID -> spec.priority (immutable on a pod, so read once)."""
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the trigger -----------------------------------------------------------------------

    async def on_event(self, event: Event) -> None:
        """A ``pod.unschedulable`` (from any replica): try to make room if this replica leads."""
        if not isinstance(event, PodUnschedulable) or not self._leadership.is_leader or self._api is None:
            return
        try:
            outcome = await self.consider(event.namespace, event.name, event.uid, event.reasons)
        except KubeError as e:
            outcome = Outcome(action="failed", reason=str(e))
            log.warning("preemption for %s/%s failed: %s", event.namespace, event.name, e)
        self._on_outcome(outcome)

    async def consider(self, namespace: str, name: str, uid: str, reasons: Mapping[str, str]) -> Outcome:
        """Make room for the pod if its priority allows and victims exist; else say why not."""
        assert self._api is not None
        self._expire()
        if PodUID(uid) in self.holds:
            return Outcome(action="held", node=self.holds[PodUID(uid)].node)
        pod = await self._api.get_pod(namespace, name)
        meta = (pod or {}).get("metadata") or {}
        if pod is None or meta.get("uid") != uid or meta.get("deletionTimestamp"):
            return Outcome(action="gone")
        if (pod.get("spec") or {}).get("nodeName") or self._decided(PodUID(uid)):
            return Outcome(action="not_pending")
        try:
            priority, policy = pod_priority(pod)
            request = pod_request(pod, self._names)
        except (BadInput, RequestError) as e:
            return Outcome(action="failed", reason=f"unreadable pod: {e}")
        if policy == PreemptionPolicy.NEVER:
            return Outcome(action="never", reason="preemptionPolicy is Never")
        spared: list[Resident] = []
        for _ in range(ATTEMPTS):
            nodes, residents = await self._picture(request, {r.uid for r in spared})
            found: Plan = plan(nodes, residents, request, priority, preemption_policy=policy,
                               policies=self._placement.policies)
            best = found.best
            if best is None:
                return Outcome(action="no_plan", reason=found.reason, spared=_keys(spared))
            refused = await self._refusing(best.victims)
            if refused:
                spared.extend(refused)
                continue
            why = "; ".join(f"{n}: {r}" for n, r in sorted(reasons.items()))[:512]
            await self._preempt(pod, request, priority, best, why=why)
            return Outcome(action="preempted", node=best.node, victims=_keys(best.victims),
                           spared=_keys(spared))
        return Outcome(action="no_plan", reason="every plan met a PodDisruptionBudget", spared=_keys(spared))

    def _decided(self, uid: PodUID) -> bool:
        """The pod is decided and being bound: its DECIDED entry is written before the Binding, so
        the API server may still show it pending. A refusal published before its room was made and
        handled late must not plan a second round (CI saw 4 victims where 2 made the room)."""
        entry = self._ledger.entry(uid)
        return entry is not None and entry.state is not AllocationState.RESERVED

    async def _picture(
        self, request: PodRequest, spared: set[PodUID]
    ) -> tuple[list[NodeState], dict[NodeName, list[Resident]]]:
        """Each usable node's Fit state and the pods that may be evicted there (not spared ones, not
        pods already being evicted for a hold, not reservations: they are pods still pending)."""
        now = self._clock()
        evicting = {uid for hold in self.holds.values() for uid in hold.victims}
        nodes: list[NodeState] = []
        residents: dict[NodeName, list[Resident]] = {}
        for name in self._ledger.nodes():
            state = self._placement.node_state(name)
            if state is None or self._placement.unusable(name, now) is not None:
                continue
            nodes.append(state)
            on_node = []
            for entry in self._ledger.entries_on(name):
                if entry.state is AllocationState.RESERVED or entry.pod_uid in spared | evicting:
                    continue
                if entry.pod_uid == request.uid:
                    continue
                priority = await self._priority(entry)
                if priority is None:
                    continue
                on_node.append(Resident(uid=entry.pod_uid, namespace=entry.namespace, name=entry.name,
                                        priority=priority, devices=entry.devices,
                                        init_count=entry.init_count))
            residents[name] = on_node
        return nodes, residents

    async def _priority(self, entry: Allocation) -> int | None:
        known = self._priorities.get(entry.pod_uid)
        if known is not None:
            return known
        assert self._api is not None
        pod = await self._api.get_pod(entry.namespace, entry.name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != entry.pod_uid:
            return None
        try:
            priority, _ = pod_priority(pod)
        except BadInput:
            return None
        self._priorities[entry.pod_uid] = priority
        return priority

    async def _refusing(self, victims: tuple[Resident, ...]) -> list[Resident]:
        """The victims the API server would not evict now (dry runs: nothing is deleted)."""
        assert self._api is not None
        refused = []
        for v in victims:
            try:
                await self._api.evict(v.namespace, v.name, v.uid, dry_run=True)
            except EvictionRefused as e:
                log.info("preemption: %s is protected (%s); sparing it", v.key, e)
                refused.append(v)
            except NotFound:
                pass  # gone already: its slices are freed anyway
        return refused

    async def _preempt(self, pod: Mapping[str, Any], request: PodRequest, priority: int, best: Preemption,
                       *, why: str) -> None:
        assert self._api is not None
        node, card, victims = best.node, best.card or "", best.victims
        hold = Hold(pod=request, node=node, expires_at=self._clock() + self.hold_s, victims={
            v.uid: entry for v in victims if (entry := self._ledger.entry(v.uid)) is not None})
        self.holds[request.uid] = hold
        for v in victims:
            try:
                await self._api.evict(v.namespace, v.name, v.uid, dry_run=False)
            except NotFound:
                pass
            except EvictionRefused as e:
                # a budget changed between the dry run and now: the others still go; the next
                # refusal of the pod plans again around this one
                log.warning("preemption: eviction of %s refused after its dry run: %s", v.key, e)
                hold.victims.pop(v.uid, None)
                continue
            self._events.emit(PodPreempted(
                node=node, namespace=v.namespace, name=v.name, uid=v.uid, priority=v.priority,
                beneficiary_namespace=request.namespace, beneficiary_name=request.name,
                beneficiary_uid=request.uid, beneficiary_priority=priority, card=card, reason=why))
            victim_pod = {"metadata": {"namespace": v.namespace, "name": v.name, "uid": v.uid}}
            where = f"node {node}" + (f", card {card}" if card else "")
            await self._record(victim_pod, "Preempted",
                               f"Preempted by {request.namespace}/{request.name} (priority {priority}) "
                               f"to make room on {where}")
        names = ", ".join(f"{v.key} (priority {v.priority})" for v in victims)
        await self._record(pod, "Preempting", f"gpubus evicted {names} to make room on node {node}"
                           + (f", card {card}" if card else ""))
        try:
            await self._api.nominate(request.namespace, request.name, node)
        except KubeError as e:
            log.info("could not nominate %s for %s/%s: %s", node, request.namespace, request.name, e)
        log.info("preempted %s for %s/%s (priority %d) on %s %s", names, request.namespace, request.name,
                 priority, node, card)
        self.on_change(node)

    async def _record(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        assert self._api is not None
        try:
            await self._api.record(pod, reason, message)
        except KubeError as e:
            log.info("could not record event %s: %s", reason, e)

    # --- holding the room ------------------------------------------------------------------

    def on_change(self, node: NodeName) -> None:
        """The ledger changed on ``node``: keep each hold's freed room out of other pods' reach.

        Synchronous, called right after the change: no filter runs between a victim's entry
        leaving and its placeholder (or the pod's own reservation) taking the room.
        """
        now = self._clock()
        for uid, hold in list(self.holds.items()):
            if hold.node != node:
                continue
            own = self._ledger.entry(uid)
            if now >= hold.expires_at or (own is not None and own.state is not AllocationState.RESERVED):
                self._release(uid)  # timed out, or bound (the pod's decided entry holds its room)
                continue
            if hold.reserved:
                continue  # the pod's own reservation holds the room: no placeholder comes back
            gone = [v for v in hold.victims if self._ledger.entry(v) is None]
            for v in gone:
                placeholder = PodUID(PLACEHOLDER + v)
                if placeholder not in hold.placeholders:
                    victim = hold.victims[v]
                    self._ledger.reserve(replace(victim, pod_uid=placeholder), hold.expires_at)
                    hold.placeholders.add(placeholder)
            if len(gone) == len(hold.victims) and not hold.reserved:
                self._drop_placeholders(hold)
                fit = self._placement.decide(hold.pod, node, now)
                if fit.fit:
                    self._ledger.reserve(Allocation(
                        pod_uid=uid, namespace=hold.pod.namespace, name=hold.pod.name, node=node,
                        devices=fit.devices, containers=tuple(c.name for c in hold.pod.containers),
                        init_count=sum(1 for c in hold.pod.containers if c.init),
                        state=AllocationState.RESERVED, decided_at=now), hold.expires_at)
                    hold.reserved = True
                    self._spawn(self._requeue(hold.pod))
                else:
                    log.warning("preemption for %s/%s: no room on %s once its victims left (%s)",
                                hold.pod.namespace, hold.pod.name, node, fit.reason)
                    self._release(uid)

    def _drop_placeholders(self, hold: Hold) -> None:
        for placeholder in hold.placeholders:
            self._ledger.delete(placeholder)
        hold.placeholders.clear()

    def _release(self, uid: PodUID) -> None:
        hold = self.holds.pop(uid, None)
        if hold is not None:
            self._drop_placeholders(hold)

    def _expire(self) -> None:
        now = self._clock()
        for uid in [u for u, h in self.holds.items() if now >= h.expires_at]:
            self._release(uid)

    def release_all(self) -> None:
        """This replica stopped leading: its holds and placeholders go (the next leader starts afresh)."""
        for uid in list(self.holds):
            self._release(uid)

    async def _requeue(self, pod: PodRequest) -> None:
        """The room is free: have kube-scheduler retry the pod now, not after its backoff."""
        assert self._api is not None
        try:
            await self._api.requeue(pod.namespace, pod.name, f"{self._clock():.3f}")
        except KubeError as e:
            log.info("could not requeue %s/%s: %s", pod.namespace, pod.name, e)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work, name="preemption-requeue")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self.release_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _keys(residents: tuple[Resident, ...] | list[Resident]) -> tuple[str, ...]:
    return tuple(r.key for r in residents)


class KubePreemptionApi:
    """:class:`PreemptionApi` on a real API server (the scheduler's :class:`KubeClient`)."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return await self._kube.get_pod(namespace, name)

    async def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> None:
        body: dict[str, Any] = {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}, **({"dryRun": ["All"]} if dry_run else {})},
        }
        try:
            await self._kube._send("evict pod", "POST", _pod_path(namespace, name, "/eviction"), body)
        except KubeError as e:
            if e.code == 429:
                raise EvictionRefused(str(e)) from None
            raise

    async def nominate(self, namespace: str, name: str, node: str) -> None:
        await self._kube._send("nominate pod", "PATCH", _pod_path(namespace, name, "/status"),
                               {"status": {"nominatedNodeName": node}},
                               "application/merge-patch+json")

    async def requeue(self, namespace: str, name: str, stamp: str) -> None:
        patch = {"metadata": {"annotations": {REQUEUE_ANNOTATION: stamp}}}
        await self._kube.patch_pod(namespace, name, patch)

    async def record(self, pod: Mapping[str, Any], reason: str, message: str, kind: str = "Normal") -> None:
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name,
                               "uid": str(meta.get("uid") or "")},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        await self._kube._send("record event", "POST", f"/api/v1/namespaces/{namespace}/events", event)
