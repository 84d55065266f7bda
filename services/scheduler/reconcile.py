"""Keeping the ledger true to the cluster (contract item 3): pods, nodes and node-agent verdicts.

Leader only: watch pods (list + watch, re-list on 410; every pod, but only a slim record of those
that matter is held, and the whole pod while one of ours waits for its bind, which /bind reads
instead of the API server: :mod:`.watched`) to release the slices of deleted and finished pods; at
start, release entries whose pod no longer exists and adopt bound pods that carry HAMi's
annotations but have no entry, whatever their scheduler name (how a HAMi cluster migrates);
consume ``allocation.applied`` and ``allocation.failed`` to move entries to APPLIED or FAILED (a
failure frees the slice) and have the pod's ``hami.io/bind-phase`` set to match (with HAMi's
``hami.io/vgpu-node`` label in the same patch), off the event path.
Every replica: watch nodes for the annotations Fit reads and to drop removed nodes.

Orchestration over ``state`` and the Kubernetes port; must not know HTTP or Fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from services.scheduler.binder import Binder
from services.scheduler.bindphase import BindPhaseWriter
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.nodeadmit import NodeBook
from services.scheduler.state import State
from services.scheduler.watched import AwaitingPods, awaits_bind
from shared import annotations as ann
from shared.bus import Subscription
from shared.errors import AnnotationError, BusUnavailable, RequestError
from shared.events import AllocationApplied, AllocationFailed, Event
from shared.kube import KubeApi, list_and_watch_nodes, list_and_watch_pods
from shared.lifetime import TaskSet
from shared.model import Allocation, AllocationState, DeviceUUID, MigSlice, NodeName, PodDevices, PodUID
from shared.requests import DEFAULT_NAMES, ResourceNames, container_request

log = logging.getLogger(__name__)

_TERMINAL = frozenset({"Succeeded", "Failed"})
#: Node annotations Fit reads.
_NODE_KEYS = (ann.DEVICE_CORDON, ann.NODE_SCORE)
_HAMI_PREFIX = "hami.io/"
#: Pod metadata the slim record keeps (list+watch needs namespace, name and resourceVersion).
_SLIM_META = ("uid", "namespace", "name", "resourceVersion", "deletionTimestamp")
_PHASE_STATE = {
    ann.BindPhase.SUCCESS.value: AllocationState.APPLIED,
    ann.BindPhase.FAILED.value: AllocationState.FAILED,
}


def slim_pod(
    pod: Mapping[str, Any],
    *,
    scheduler_name: str,
    known: Callable[[str], bool],
    names: ResourceNames = DEFAULT_NAMES,
) -> dict[str, Any] | None:
    """The part of a pod the reconciler reads, or None if the pod does not matter to us.

    A pod matters if it is ours (``schedulerName``; every pod when that is ""), carries HAMi's
    allocation annotation (adopted whatever its scheduler name), or has a ledger entry. The record
    keeps the pod's JSON shape, so :func:`adoptable` and :meth:`Reconciler.on_pod` read either.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if not (
        not scheduler_name
        or spec.get("schedulerName") == scheduler_name
        or ann.DEVICES_ALLOCATED in annotations
        or known(str(meta.get("uid") or ""))
    ):
        return None
    return {
        "metadata": {
            **{k: meta[k] for k in _SLIM_META if k in meta},
            "annotations": {k: v for k, v in annotations.items() if k.startswith(_HAMI_PREFIX)},
        },
        "spec": {
            **{k: spec[k] for k in ("nodeName", "schedulerName") if k in spec},
            "initContainers": [_slim_container(c, names) for c in spec.get("initContainers") or []],
            "containers": [_slim_container(c, names) for c in spec.get("containers") or []],
        },
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def _slim_container(container: Any, names: ResourceNames) -> dict[str, Any]:
    """Name, and the GPU resources it asks for (all :func:`adoptable` reads of it)."""
    if not isinstance(container, Mapping):
        return {"name": ""}
    slim: dict[str, Any] = {"name": container.get("name", "")}
    resources = container.get("resources")
    if isinstance(resources, Mapping):
        gpu = (names.count, names.memory, names.memory_percentage, names.cores)
        kept = {
            kind: {key: amounts[key] for key in gpu if key in amounts}
            for kind in ("limits", "requests")
            if isinstance(amounts := resources.get(kind), Mapping)
        }
        slim["resources"] = {kind: amounts for kind, amounts in kept.items() if amounts}
    return slim


def _cards_asked(container: Any, names: ResourceNames) -> int:
    """How many cards a container asks for, derived as HAMi derives it (defaultGPUNum for a
    memory-only request); 0 for none, or for a request that cannot be read."""
    if not isinstance(container, Mapping):
        return 0
    try:
        request = container_request(container, names, name=str(container.get("name", "")))
    except RequestError:
        return 0
    return 0 if request is None else request.nums


def adoptable(pod: Mapping[str, Any], names: ResourceNames = DEFAULT_NAMES) -> Allocation | None:
    """The ledger entry a bound pod with HAMi annotations implies, or None (AnnotationError when
    its ``vgpu-devices-allocated`` cannot be decoded: HAMi does not track such a pod either).

    Unlike HAMi, a container may hold at most as many cards as it asks for (``names.count``):
    anyone who can create a pod could otherwise book any GPU's memory by writing the annotation on a
    pod that runs without GPUs (``spec.nodeName`` set by hand, so no scheduler ever sees it)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    a = meta.get("annotations") or {}
    node = a.get(ann.ASSIGNED_NODE) or spec.get("nodeName")
    if not spec.get("nodeName") or ann.DEVICES_ALLOCATED not in a or not node or not meta.get("uid"):
        return None
    if (pod.get("status") or {}).get("phase") in _TERMINAL:
        return None
    devices: PodDevices = ann.decode_pod_devices(a[ann.DEVICES_ALLOCATED])
    init_specs = list(spec.get("initContainers") or [])
    specs = init_specs + list(spec.get("containers") or [])
    containers = tuple(c.get("name", "") for c in specs)
    devices = tuple(devices[: len(containers)]) + ((),) * max(0, len(containers) - len(devices))
    for container, slot in zip(specs, devices, strict=True):
        if len(slot) > (asked := _cards_asked(container, names)):
            raise AnnotationError(
                f"{ann.DEVICES_ALLOCATED} gives {len(slot)} GPU(s) to container "
                f"{container.get('name', '')!r}, which asks for {asked} {names.count}"
            )
    if a.get(ann.MIG_ALLOCATIONS):
        devices = _with_mig(devices, ann.decode_mig_allocations(a[ann.MIG_ALLOCATIONS]))
    return Allocation(
        pod_uid=PodUID(meta["uid"]),
        namespace=meta.get("namespace", "default"),
        name=meta.get("name", ""),
        node=NodeName(node),
        devices=devices,
        containers=containers,
        init_count=len(init_specs),
        state=_PHASE_STATE.get(a.get(ann.BIND_PHASE, ""), AllocationState.DECIDED),
        decided_at=float(a.get(ann.BIND_TIME, "0") or 0) if a.get(ann.BIND_TIME, "").isdigit() else 0.0,
    )


def _with_mig(
    devices: PodDevices, slices: Mapping[tuple[int, int], tuple[DeviceUUID, MigSlice]]
) -> PodDevices:
    """The cards with the MIG instances ``hami.io/vgpu-mig-allocations`` reserves on them, so an
    adopted pod's placements stay booked (HAMi ``scheduler.go`` restores them the same way); an
    entry naming a card the device annotation does not give that container is refused."""
    out = [list(slot) for slot in devices]
    for (ctr, dev), (gpu, held) in slices.items():
        if ctr >= len(out) or dev >= len(out[ctr]) or out[ctr][dev].uuid != gpu:
            raise AnnotationError(
                f"{ann.MIG_ALLOCATIONS} reserves {held.profile} on {gpu} for container {ctr} card {dev},"
                f" which {ann.DEVICES_ALLOCATED} does not give it"
            )
        out[ctr][dev] = replace(out[ctr][dev], mig=held)
    return tuple(tuple(slot) for slot in out)


#: The furthest back a new leader replays verdicts, seconds (an entry older than this that still
#: waits for its verdict waits for its pod's end or a retried bind).
_REPLAY_MAX_S = 3600.0


def verdicts_since(entries: Iterable[Allocation], now: float, margin_s: float) -> float:
    """Where a new leader replays node-agent verdicts from: ``2 * margin_s`` before the oldest
    entry still waiting for its verdict (DECIDED), or before now; at most ``_REPLAY_MAX_S`` back.

    A DECIDED entry holds its handoff slots until its verdict is applied, so a verdict published
    while no replica led (a leader that died with its APPLIED write in flight, every replica down
    for a while) must be replayed, or the slot would stay held for as long as the pod runs."""
    waiting = (e.decided_at for e in entries if e.state is AllocationState.DECIDED)
    oldest = min(waiting, default=now)
    return max(min(oldest, now) - 2 * margin_s, now - _REPLAY_MAX_S)


def _started_where_decided(pod: Mapping[str, Any], entry: Allocation) -> bool:
    """A DECIDED entry whose pod runs on the entry's node: the kubelet admitted it (Allocate ran)."""
    return (entry.state is AllocationState.DECIDED
            and (pod.get("status") or {}).get("phase") == "Running"
            and (pod.get("spec") or {}).get("nodeName") == entry.node)


#: ``served(pod, node)``: a context in which the pod counts as allocated for the handoff slots.
Served = Callable[[PodUID, NodeName], contextlib.AbstractContextManager[None]]


def _no_slots(pod: PodUID, node: NodeName) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


class Reconciler:
    """The leader's loops that keep the ledger equal to the cluster and to the node-agents."""

    def __init__(
        self,
        state: State,
        kube: KubeApi | None,
        *,
        binder: Binder,
        phases: BindPhaseWriter,
        metrics: SchedulerMetrics,
        scheduler_name: str,
        clock: Callable[[], float] = time.time,
        names: ResourceNames = DEFAULT_NAMES,
        nodes: NodeBook | None = None,
        awaiting: AwaitingPods | None = None,
        served: Served = _no_slots,
    ) -> None:
        self._state = state
        self._served = served
        """Frees a pod's handoff slots while its APPLIED write runs (``HandoffSlots.served``)."""
        self._writes = TaskSet("scheduler-verdicts")
        """The APPLIED writes of verdicts, each its own task (see :meth:`on_verdict`)."""
        self._applying: set[PodUID] = set()
        self._awaiting = awaiting if awaiting is not None else AwaitingPods()
        """Our unbound pods, whole, as this watch shows them (read by /bind)."""
        self._nodes = nodes if nodes is not None else NodeBook()
        """Labels, taints and unschedulable of every node, for /bind's node-side checks."""
        self._kube = kube
        self._binder = binder
        """Its running binds: a pod being bound is alive even before its entry is written."""
        self._phases = phases
        """Queues the ``hami.io/bind-phase`` patch (and node label) for a verdict; returns at once."""
        self._metrics = metrics
        """Counts releases by why, adoptions, and unusable input by source and kind: pods whose HAMi
        annotations cannot be adopted, verdicts that do not match the entry they name."""
        self._scheduler_name = scheduler_name
        self._clock = clock
        self._names = names
        self._live: dict[str, tuple[str, str]] = {}
        """UID -> (namespace, name) of every live pod that matters, as the API server shows it."""
        self._unbound: set[str] = set()
        """Live pods the API server shows without a node."""
        self.pods_synced = asyncio.Event()

    # --- node-agent verdicts ---------------------------------------------------------------

    async def subscribe_verdicts(self, since: float) -> list[Subscription]:
        """Follow applied/failed from ``since`` (a new leader replays what the old one may have missed)."""
        bus = self._state.bus
        subs: list[Subscription] = []
        try:
            for subject in ("gpubus.allocation.applied.>", "gpubus.allocation.failed.>"):
                subs.append(await bus.subscribe(subject, self.on_verdict, deliver=since))
        except BaseException:
            for sub in subs:  # none left running for a leader that could not finish its set-up
                with contextlib.suppress(BusUnavailable):
                    await sub.stop()
            raise
        return subs

    async def on_verdict(self, event: Event) -> None:
        """A node-agent's word on an entry counts only from the entry's own node, and only while
        the entry waits for it (DECIDED): a late or foreign ``failed`` would free a running pod's
        slice for someone else (a retried bind's old node, a stray publisher)."""
        if isinstance(event, AllocationApplied) and event.complete:
            uid = PodUID(event.pod_uid)
            entry = self._awaiting_verdict(event, uid)
            if entry is not None and uid not in self._applying:
                # Not awaited here: verdicts are handled one at a time, and the next pod of this
                # size on the node waits for this one's slot, so a KV round trip per verdict in
                # line would queue every bind behind the slowest. A leader that dies before the
                # write replays the verdict (``subscribe_verdicts``).
                self._apply_later(uid, entry.node)
        elif isinstance(event, AllocationFailed) and event.pod_uid:
            uid = PodUID(event.pod_uid)
            entry = self._awaiting_verdict(event, uid)
            if entry is None or uid in self._applying:
                return
            await self._state.set_state(uid, AllocationState.FAILED)
            self._phase(entry, ann.BindPhase.FAILED)
            self._metrics.released.labels("allocation_failed").inc()
            log.warning(
                "pod %s/%s: Allocate failed on %s (%s); its slice is free again",
                entry.namespace,
                entry.name,
                entry.node,
                event.reason,
            )

    def _apply_later(self, uid: PodUID, node: NodeName) -> None:
        """Write the entry APPLIED in a task of its own (once at a time per pod)."""
        self._applying.add(uid)
        self._writes.spawn(f"applied-{uid}", self._applied(uid, node))

    async def _applied(self, uid: PodUID, node: NodeName) -> None:
        """Write the entry APPLIED; its handoff slots are free from the start (``served``)."""
        try:
            with self._served(uid, node):
                applied = await self._state.set_state(uid, AllocationState.APPLIED)
        except BusUnavailable as e:
            log.warning("pod %s: could not record Allocate's verdict (%s); the entry stays decided", uid, e)
            return
        finally:
            self._applying.discard(uid)
        if applied is not None:
            self._phase(applied, ann.BindPhase.SUCCESS)

    async def close(self) -> None:
        """Stop the verdict writes still running (a deposed leader's; the next one replays them)."""
        await self._writes.close()

    def _awaiting_verdict(self, event: Event, uid: PodUID) -> Allocation | None:
        """The DECIDED entry ``event`` speaks of; None when there is none, or (counted) when the
        event came from another node."""
        entry = self._state.ledger.entry(uid)
        if entry is None or entry.state is not AllocationState.DECIDED:
            return None
        if event.node != entry.node:
            self._metrics.input_error(f"events/{event.KIND}", "wrong_node")
            log.warning("%s for pod %s came from node %r, but its entry is on %s; ignored",
                        event.KIND, uid, event.node, entry.node)
            return None
        return entry

    def _phase(self, entry: Allocation, phase: ann.BindPhase) -> None:
        self._phases.submit(entry.namespace, entry.name, phase, entry.node)

    # --- pods ------------------------------------------------------------------------------

    async def watch_pods(self) -> None:
        """List + watch pods forever; reconcile the ledger once the first list is in."""
        if self._kube is None:
            self.pods_synced.set()
            return
        # A term's view of the pods starts from its own list: pods deleted while this replica did
        # not lead send no event, and a stale record would keep their entries from the reconcile.
        self._live.clear()
        self._unbound.clear()
        synced = asyncio.Event()
        listed_at = self._clock()
        self._awaiting.clear()
        reconciler = asyncio.create_task(self._reconcile_when(synced, listed_at), name="scheduler-reconcile")
        try:
            # every pod, so HAMi's pods are adopted whatever their scheduler; only slim records are held
            async for event in list_and_watch_pods(self._kube, synced=synced, transform=self._slim):
                await self.on_pod(event["type"], event["object"])
        finally:
            self._awaiting.clear()  # no longer kept true by a watch (a deposed leader's)
            reconciler.cancel()
            await asyncio.gather(reconciler, return_exceptions=True)

    def _slim(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        if awaits_bind(pod, self._scheduler_name):
            return pod  # whole until bound: /bind reads it from here
        ledger = self._state.ledger
        return slim_pod(
            pod,
            scheduler_name=self._scheduler_name,
            known=lambda uid: ledger.entry(PodUID(uid)) is not None or self._binder.binding(uid),
            names=self._names,
        )

    async def _reconcile_when(self, synced: asyncio.Event, listed_at: float) -> None:
        await synced.wait()
        await self.reconcile(listed_at)
        self.pods_synced.set()

    async def reconcile(self, listed_at: float) -> None:
        """Release entries whose pod is gone, and decided entries whose pod is still unbound: a
        leader that died between its decision and the binding left them (holding their handoff slots)
        behind, and no Allocate will ever free them (decided before the list was taken)."""
        for entry in list(self._state.ledger.entries()):
            if (
                self._binder.binding(entry.pod_uid)
                or entry.state is AllocationState.RESERVED
                or entry.decided_at > listed_at
            ):
                continue
            if entry.pod_uid not in self._live:
                await self.release(entry.pod_uid, "pod no longer exists")
            elif entry.state is AllocationState.DECIDED and entry.pod_uid in self._unbound:
                await self.release(entry.pod_uid, "bind never completed: the pod is unbound")
        log.info(
            "reconciled the ledger with the API server: %d entries, %d live pods",
            len(self._state.ledger),
            len(self._live),
        )

    async def on_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        finished = (pod.get("status") or {}).get("phase") in _TERMINAL
        if kind != "DELETED" and not finished and not (pod.get("spec") or {}).get("nodeName"):
            self._unbound.add(uid)
        else:
            self._unbound.discard(uid)
        if kind != "DELETED" and awaits_bind(pod, self._scheduler_name):
            self._awaiting.put(uid, pod)
        else:
            self._awaiting.drop(uid)
        if kind == "DELETED" or finished:
            self._live.pop(uid, None)
            if self._state.ledger.entry(PodUID(uid)) is not None:
                await self.release(PodUID(uid), "pod deleted" if kind == "DELETED" else "pod finished")
            return
        self._live[uid] = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        entry = self._state.ledger.entry(PodUID(uid))
        if entry is None and not self._binder.binding(uid):
            await self._adopt(pod)
        elif entry is not None and _started_where_decided(pod, entry) and uid not in self._applying:
            # Allocate ran before its containers started, whatever became of the node-agent's
            # verdict (lost with its process, dropped from a full outbox): the slot must not
            # stay held while the pod runs. Usually the verdict came first and this never runs.
            self._apply_later(PodUID(uid), entry.node)

    def live(self, uid: str) -> tuple[str, str] | None:
        """(namespace, name) of the pod with this UID if the pod watch shows it alive."""
        return self._live.get(uid)

    async def _adopt(self, pod: Mapping[str, Any]) -> None:
        try:
            allocation = adoptable(pod, self._names)
        except AnnotationError as e:
            meta = pod.get("metadata") or {}
            self._metrics.input_error("pods", "bad_devices_annotation")
            log.warning("pod %s/%s: cannot adopt, %s", meta.get("namespace"), meta.get("name"), e)
            return
        if allocation is None:
            return
        try:
            if await self._state.adopt(allocation):
                self._metrics.adopted.inc()
                log.info(
                    "adopted %s/%s on %s from its HAMi annotations",
                    allocation.namespace,
                    allocation.name,
                    allocation.node,
                )
        except BusUnavailable as e:
            log.warning("could not adopt %s/%s: %s", allocation.namespace, allocation.name, e)

    async def release(self, uid: PodUID, why: str) -> None:
        try:
            held = await self._state.release(uid, why)
        except BusUnavailable as e:
            log.warning("could not release pod %s (%s); will retry on the next event: %s", uid, why, e)
            return
        if held is None:
            return
        self._metrics.released.labels(why.split(":", maxsplit=1)[0].replace(" ", "_")).inc()

    # --- nodes -----------------------------------------------------------------------------

    async def watch_nodes(self) -> None:
        """Every replica: node annotations Fit reads; deleted nodes leave the picture."""
        if self._kube is None:
            return
        async for event in list_and_watch_nodes(self._kube):
            node = event["object"]
            name = NodeName((node.get("metadata") or {}).get("name", ""))
            if not name:
                continue
            if event["type"] == "DELETED":
                self._state.ledger.remove_node(name)
                self._nodes.remove(name)
                continue
            self._nodes.put(node)
            a = (node.get("metadata") or {}).get("annotations") or {}
            self._state.ledger.set_annotations(name, {k: a[k] for k in _NODE_KEYS if k in a})
