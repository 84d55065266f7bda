"""Bind: turn kube-scheduler's choice of node into a decided, ledgered and bound pod.

The order is the Allocate handoff (``shared/handoff.py``; the README's node-agent section, "The
Allocate handoff"): Fit against the current ledger under a per-node lock and reserve the result in
process; wait for the pod's handoff slots (``handoff_slots``: no other pod of its container sizes
decided on the node and not yet allocated); write the DECIDED ledger entry, fenced on this
leader's term, and then publish ``allocation.decided``; POST the Binding carrying the HAMi
annotations in its own metadata (one atomic write). Any failure undoes what was done (reservation,
entry + a released event) and raises :class:`BindError` with a message for the pod's events; a
decision the store refused (a newer term began: this replica no longer leads) wrote nothing, so
only the reservation goes.

The decision that could over-commit is made here: Fit runs against the ledger and its result is
reserved in the same synchronous step (under the node's lock, with no ``await`` between them), so
any later Fit on that node - or in that namespace, for its ResourceQuota - already counts it. The
reservation expires after ``reservation_ttl_s`` if the bind never writes its ledger entry; once
written, the DECIDED entry holds the slice until the pod goes. A filter answer that is stale by
bind time is refused with the fresh Fit's reason (``no_fit``) and kube-scheduler retries.

Filter also holds a *provisional* slice (:meth:`Binder.provisional`), as HAMi's filter does:
kube-scheduler filters the next pod while this one's bind is still on its way, and without it both
would be told the same nearly full node fits, so one bind fails and the pod goes round again. The
provisional slice is on the node prioritize will rank first, lapses after ``provisional_ttl_s``,
and is dropped by the pod's own bind before its real Fit (on whatever node was chosen). It never
decides anything: it only makes the next filters see the capacity as taken.

This is orchestration; each step is a call into ``placement``, ``state``, ``handoff_slots`` or the
Kubernetes port. Must not know HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from services.scheduler.errors import BindError
from services.scheduler.fit import NodeFit
from services.scheduler.handoff_slots import HandoffSlots, LeaseTimeout
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.nodeadmit import NodeBook, node_rejects
from services.scheduler.placement import Placement
from services.scheduler.pod_cache import PodCache
from services.scheduler.state import State
from services.scheduler.watched import AwaitingPods
from services.scheduler.wire import BindingArgs
from shared import annotations as ann
from shared.errors import AnnotationError, BusUnavailable, Fenced, RequestError
from shared.handoff import device_counts
from shared.kube import KubeApi, KubeError
from shared.model import Allocation, AllocationState, NodeName, PodRequest, PodUID
from shared.requests import DEFAULT_NAMES, ResourceNames, pod_request

log = logging.getLogger(__name__)

class Leadership(Protocol):
    """Whether this replica binds (:class:`~services.scheduler.leader.LeaderElection`)."""

    @property
    def is_leader(self) -> bool: ...
    @property
    def leader(self) -> str | None:
        """The replica that binds, as far as this one knows."""
        ...

    def fenced(self, why: str) -> None:
        """The store refused this replica's decision: a newer term began, so step down."""
        ...


class QuotaReader(Protocol):
    """The namespace quotas (:class:`shared.quota_cache.QuotaCache`): wait for a namespace's first read."""

    async def ensure(self, namespace: str) -> object: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BindOptions:
    bind_timeout_s: float = 25.0
    reservation_ttl_s: float = 60.0
    provisional_ttl_s: float = 10.0
    """How long filter's provisional slice waits for the pod's bind (0 turns it off)."""
    names: ResourceNames = DEFAULT_NAMES
    scheduler_name: str = "gpubus-scheduler"
    """Only pods whose ``spec.schedulerName`` is this are bound ("" binds any pod)."""


def hami_annotations(allocation: Allocation, now: float) -> dict[str, str]:
    """The annotations HAMi's scheduler writes, carried by the Binding itself."""
    encoded = ann.encode_pod_devices(allocation.devices)
    stamp = str(int(now))
    out = {
        ann.ASSIGNED_NODE: allocation.node,
        ann.ASSIGNED_TIME: stamp,
        ann.DEVICES_TO_ALLOCATE: encoded,
        ann.DEVICES_ALLOCATED: encoded,
        ann.BIND_PHASE: ann.BindPhase.ALLOCATING.value,
        ann.BIND_TIME: stamp,
    }
    mig = ann.encode_mig_allocations(allocation.devices)
    if mig:
        out[ann.MIG_ALLOCATIONS] = mig  # HAMi PatchAnnotations: only for pods holding MIG instances
    return out


class Binder:
    """Binds pods for the leader replica; ``is_leader`` is asked on every call."""

    def __init__(
        self,
        *,
        state: State,
        placement: Placement,
        slots: HandoffSlots,
        kube: KubeApi | None,
        pods: PodCache,
        leadership: Leadership,
        metrics: SchedulerMetrics,
        quotas: QuotaReader | None,
        options: BindOptions,
        clock: Callable[[], float] = time.time,
        nodes: NodeBook | None = None,
        awaiting: AwaitingPods | None = None,
    ) -> None:
        self._state = state
        self._awaiting = awaiting if awaiting is not None else AwaitingPods()
        """Our unbound pods as the leader's pod watch shows them: read instead of a GET when there."""
        self._nodes = nodes
        """The Node objects the node watch saw: /bind re-checks selector, affinity and taints."""
        self._placement = placement
        self._slots = slots
        self._kube = kube
        self._pods = pods
        self._leadership = leadership
        self._metrics = metrics
        self._quotas = quotas
        """Awaited with the pod's namespace before Fit: its ResourceQuota has been read once."""
        self._opt = options
        self._clock = clock
        self._node_locks: dict[NodeName, asyncio.Lock] = {}
        self._in_flight: set[str] = set()

    def binding(self, uid: str) -> bool:
        """True while a bind for this pod is running here."""
        return uid in self._in_flight

    def owner_alive(self, uid: str) -> bool:
        """A slot's holder is alive while its bind runs or its entry waits for Allocate."""
        if uid in self._in_flight:
            return True
        entry = self._state.ledger.entry(PodUID(uid))
        return entry is not None and entry.state in (AllocationState.RESERVED, AllocationState.DECIDED)

    def drop_provisional(self, uid: PodUID) -> None:
        """Forget the slice an earlier filter held for the pod (a filter again must not count it)."""
        if uid not in self._in_flight:  # a running bind's reservation is that bind's
            self._drop_reserved(uid)

    def _drop_reserved(self, uid: PodUID) -> None:
        """Drop the pod's entry if it is only a reservation (never a DECIDED one)."""
        held = self._state.ledger.entry(uid)
        if held is not None and held.state is AllocationState.RESERVED:
            self._state.ledger.delete(uid)

    def provisional_node(self, uid: PodUID) -> NodeName | None:
        """Where the pod's filter-time slice is held (None: none, or its bind has begun)."""
        if uid in self._in_flight:
            return None
        held = self._state.ledger.entry(uid)
        return held.node if held is not None and held.state is AllocationState.RESERVED else None

    def provisional(self, request: PodRequest, node: NodeName) -> bool:
        """Hold the slice Fit gives the pod on ``node`` until its bind comes; True if held.

        Leader only (a standby's ledger binds nothing); never over a DECIDED entry or a running
        bind. Synchronous, like the bind's own Fit-and-reserve step, so no Fit sees half of it.
        """
        uid = request.uid
        if self._opt.provisional_ttl_s <= 0 or not self._leadership.is_leader or uid in self._in_flight:
            return False
        self._drop_reserved(uid)  # an earlier filter's slice: Fit again without it
        if self._state.ledger.entry(uid) is not None:
            return False  # decided already
        now = self._clock()
        fit = self._placement.decide(request, node, now)
        if not fit.fit:
            return False
        allocation = self._allocation(request, node, fit, now)
        self._state.ledger.reserve(allocation, now + self._opt.provisional_ttl_s)
        return True

    async def bind(self, args: BindingArgs) -> str:
        """Bind the pod; returns the outcome label. Raises BindError (nothing left held)."""
        if not self._leadership.is_leader:
            leader = self._leadership.leader or "unknown"
            raise BindError("not_leader", f"this scheduler replica is a standby; the leader ({leader}) binds")
        if self._kube is None:
            raise BindError("no_kube", "no Kubernetes API configured (--kubeconfig or --in-cluster)")
        try:
            pod, parsed, watched = await self._verified_pod(args)
            request = self._request(pod, args) if parsed is None else parsed
            node = NodeName(args.node)
            self._check_node(pod, args, node)
        except BindError:
            if args.pod_uid and args.pod_uid not in self._in_flight:
                self._drop_reserved(PodUID(args.pod_uid))  # a slice a filter held for it goes too
            raise
        if not request.wants_gpu:
            await self._post_binding(args, node, {})
            return "passthrough"
        uid = request.uid
        if uid in self._in_flight:
            # both would write the one ledger key; the loser's undo would free the winner's slice
            raise BindError(
                "bind_in_progress", f"pod {request.namespace}/{request.name} is being bound already"
            )
        self._in_flight.add(uid)  # no await since the check: one bind per pod at a time
        try:
            if await self._already_bound(args, pod, request, node, cached=watched):
                return "already_bound"
            if self._quotas is not None:
                await self._quotas.ensure(request.namespace)
            return await self._bind_gpu_pod(args, request, node)
        finally:
            self._in_flight.discard(uid)

    async def _bind_gpu_pod(self, args: BindingArgs, request: PodRequest, node: NodeName) -> str:
        uid = request.uid
        reserved = decided = False
        try:
            if not await self._state.in_term(self._opt.bind_timeout_s):
                raise BindError("not_leader", "this scheduler replica leads but has not begun its term")
            allocation = await self._reserve(request, node)
            reserved = True
            held = await self._slots_for(allocation)
            try:
                if not self._leadership.is_leader:
                    # the wait for a slot can outlast a term: a deposed replica decides nothing
                    raise BindError("not_leader",
                                    "this scheduler replica stopped leading while the bind waited")
                # Set first: a decide that fails after its KV write (or whose event is still queued)
                # must be undone with a full release, so the node-agent sees released after decided.
                decided = True
                await self._state.decide(allocation)
            except Fenced as e:
                decided = False  # the store refused it: nothing was written or sent
                self._leadership.fenced(str(e))
                raise BindError("not_leader", f"this scheduler replica no longer leads: {e}") from None
            finally:
                self._slots.release(held)  # the ledger holds the decision's slots from here
            await self._post_binding(args, node, hami_annotations(allocation, allocation.decided_at))
        except BaseException as e:
            await self._undo(uid, node, e, reserved=reserved, decided=decided)
            raise
        return "bound"

    async def _slots_for(self, allocation: Allocation) -> list[asyncio.Lock]:
        """Wait for the pod's handoff slots on its node (within the bind budget)."""
        started = time.monotonic()
        try:
            held = await self._slots.acquire(allocation.node, device_counts(allocation.devices),
                                             allocation.pod_uid, started + self._opt.bind_timeout_s)
        except LeaseTimeout as e:
            raise BindError(
                "lease_timeout",
                f"{e}; gave up after {self._opt.bind_timeout_s:.0f}s "
                f"(the node-agent has not run Allocate for it yet)",
            ) from None
        self._metrics.lease_wait_seconds.observe(time.monotonic() - started)
        return held

    async def _reserve(self, request: PodRequest, node: NodeName) -> Allocation:
        async with self._node_locks.setdefault(node, asyncio.Lock()):
            self._drop_reserved(request.uid)  # filter's provisional slice: the real Fit replaces it
            now = self._clock()
            try:
                fit: NodeFit = self._placement.decide(request, node, now)
            except AnnotationError as e:
                raise BindError("bad_pod", f"pod {request.namespace}/{request.name}: {e}") from None
            if not fit.fit:
                raise BindError(
                    "no_fit", f"pod {request.namespace}/{request.name} does not fit node {node}: {fit.reason}"
                )
            allocation = self._allocation(request, node, fit, now)
            self._state.ledger.reserve(allocation, now + self._opt.reservation_ttl_s)
            return allocation

    @staticmethod
    def _allocation(request: PodRequest, node: NodeName, fit: NodeFit, now: float) -> Allocation:
        return Allocation(
            pod_uid=request.uid,
            namespace=request.namespace,
            name=request.name,
            node=node,
            devices=fit.devices,
            containers=tuple(c.name for c in request.containers),
            init_count=sum(1 for c in request.containers if c.init),
            state=AllocationState.RESERVED,
            decided_at=now,
        )

    async def _undo(
        self, uid: PodUID, node: NodeName, error: BaseException, *, reserved: bool, decided: bool
    ) -> None:
        """Take back what this bind wrote, and only that: an entry it did not reserve is another
        bind's (or the pod's earlier, still valid, one)."""
        why = f"bind failed: {error}"
        try:
            if decided:
                await self._state.release(uid, why)
            elif reserved:
                self._drop_reserved(uid)
        except BusUnavailable as e:
            log.error("pod %s: could not undo a failed bind (%s); reconcile will release it", uid, e)
        self._slots.wake(node)

    async def _pod(
        self, args: BindingArgs, *, cached: bool = True
    ) -> tuple[Mapping[str, Any], PodRequest | None]:
        """The pod (from filter's cache, else the API) and its request if filter parsed it."""
        seen = self._pods.pop(args.pod_uid) if cached else None
        pod, parsed = (None, None) if seen is None else seen
        if pod is None:
            assert self._kube is not None
            self._metrics.bind_pod_reads.labels("api").inc()
            try:
                pod = await self._kube.get_pod(args.pod_namespace, args.pod_name)
            except KubeError as e:
                raise BindError(
                    "kube_unavailable", f"cannot read pod {args.pod_namespace}/{args.pod_name}: {e}"
                ) from None
        if pod is None:
            raise BindError("pod_not_found", f"pod {args.pod_namespace}/{args.pod_name} does not exist")
        uid = (pod.get("metadata") or {}).get("uid")
        if args.pod_uid and uid and uid != args.pod_uid:
            raise BindError(
                "pod_not_found",
                f"pod {args.pod_namespace}/{args.pod_name} has UID {uid}, "
                f"not {args.pod_uid} (it was re-created)",
            )
        return pod, parsed

    async def _verified_pod(self, args: BindingArgs) -> tuple[Mapping[str, Any], PodRequest | None, bool]:
        """The pod as the API server has it (never only what a /filter body claimed): as the leader's
        pod watch last showed it, else read now; refused unless it is ours and not being deleted.
        Filter's parse of it is reused when it is the same revision. The flag: from the watch (which
        may lag a bind that just happened: :meth:`_already_bound` reads again before it releases)."""
        seen = self._pods.pop(args.pod_uid)
        watched = self._awaiting.get(args.pod_uid) if args.pod_uid else None
        if watched is not None:
            self._metrics.bind_pod_reads.labels("watch").inc()
        pod = (await self._pod(args, cached=False))[0] if watched is None else watched
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        ours = self._opt.scheduler_name
        if ours and spec.get("schedulerName") != ours:
            raise BindError("not_ours", f"pod {args.pod_namespace}/{args.pod_name} has schedulerName "
                            f"{str(spec.get('schedulerName'))[:253]!r}, not {ours!r}: not ours to bind")
        if meta.get("deletionTimestamp"):
            raise BindError("pod_deleting", f"pod {args.pod_namespace}/{args.pod_name} is being deleted")
        if seen is not None and seen[1] is not None:
            cached_meta = seen[0].get("metadata") or {}
            if (cached_meta.get("uid"), cached_meta.get("resourceVersion")) == (
                    meta.get("uid"), meta.get("resourceVersion")):
                return pod, seen[1], watched is not None
        return pod, None, watched is not None

    def _check_node(self, pod: Mapping[str, Any], args: BindingArgs, node: NodeName) -> None:
        """The node-side checks kube-scheduler ran before filter, again, on the node as watched."""
        facts = self._nodes.get(node) if self._nodes is not None else None
        if facts is None:
            return  # not seen by the watch yet: Fit still refuses a node without inventory
        reason = node_rejects(pod, facts)
        if reason is not None:
            raise BindError("node_mismatch", f"pod {args.pod_namespace}/{args.pod_name} cannot go to "
                            f"node {node}: {reason}")

    def _request(self, pod: Mapping[str, Any], args: BindingArgs) -> PodRequest:
        try:
            request = pod_request(pod, self._opt.names)
        except RequestError as e:
            raise BindError("bad_pod", f"pod {args.pod_namespace}/{args.pod_name}: {e}") from None
        if not request.uid:
            request = PodRequest(
                namespace=request.namespace,
                name=request.name,
                uid=PodUID(args.pod_uid),
                containers=request.containers,
                annotations=request.annotations,
            )
        return request

    async def _already_bound(
        self, args: BindingArgs, pod: Mapping[str, Any], request: PodRequest, node: NodeName, *, cached: bool
    ) -> bool:
        """A pod with a decided entry: True if it is bound to this node (a retried bind). If it is
        bound elsewhere the bind is refused and the entry kept; only an entry whose pod the API
        server shows unbound (its bind failed and could not be undone) is released.

        Filter's cached copy of the pod may predate its binding, so an unbound-looking pod from that
        cache is read again from the API server before anything is released.
        """
        entry = self._state.ledger.entry(request.uid)
        if entry is None or entry.state is AllocationState.RESERVED:
            return False
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if not bound_to and cached:  # a copy just read from the API server is fresh already
            fresh, _ = await self._pod(args, cached=False)
            bound_to = (fresh.get("spec") or {}).get("nodeName")
        if bound_to == node and entry.node == node:
            return True
        if bound_to:
            raise BindError(
                "bound_elsewhere",
                f"pod {request.namespace}/{request.name} is already bound to node {bound_to}",
            )
        await self._state.release(entry.pod_uid, "stale entry: the API server shows the pod unbound")
        return False

    async def _post_binding(self, args: BindingArgs, node: NodeName, annotations: dict[str, str]) -> None:
        assert self._kube is not None
        try:
            await self._kube.bind_pod(args.pod_namespace, args.pod_name, args.pod_uid, node, annotations)
        except KubeError as e:
            raise BindError(
                "bind_failed", f"binding {args.pod_namespace}/{args.pod_name} to {node} failed: {e}"
            ) from None
