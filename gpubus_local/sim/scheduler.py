"""The kube-scheduler stand-in: schedules pods of one ``schedulerName`` through the extender's HTTP API.

What it keeps of kube-scheduler: informers (list+watch of pods and nodes), a scheduling queue with
per-pod backoff (1 s doubling to 10 s) where an unschedulable pod waits for a cluster event (a pod
deleted or finished, a node added or changed) and its backoff, or 5 minutes without one; ONE
scheduling cycle at a time (in-tree filters that stop, as kube-scheduler's do, once they found
:func:`feasible_nodes_to_find` nodes, starting where the last cycle stopped; extender ``/filter``,
extender ``/prioritize`` weighted x10, highest total wins, ties at random); binding cycles run
concurrently, without a limit as in kube-scheduler (extender ``/bind`` when it has a bindVerb, else
``pods/binding``); "assumed" pods are not rescheduled while the watch has not yet shown them bound;
unschedulable pods get ``PodScheduled=False`` (reason ``Unschedulable`` with kube-scheduler's "0/N
nodes are available: ..." message, or ``SchedulerError``) on their status, and every outcome is an
Event, as kube-scheduler records them: ``FailedScheduling`` (Warning) with that message, or
``Scheduled`` (Normal) "Successfully assigned NS/NAME to NODE", from the scheduler's name
(``events``). No preemption; resource fit only for the extended resources in
``SchedulerSettings.fit_resources`` (see there why ``nvidia.com/gpu`` is one).

It knows the API server only through ``KubeApi`` (+ ``patch_pod_status``) and the extender only
through its HTTP endpoints; it imports nothing from the services.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from gpubus_local.sim.events import EventRecorder, EventSink, RecorderSettings, pod_reference, truncate_note
from gpubus_local.sim.extender_client import ExtenderClient, ExtenderConfig, ExtenderError
from gpubus_local.sim.node_fit import (
    Amounts,
    fit_error_message,
    insufficient,
    is_plain,
    node_allocatable,
    node_rejects,
    pod_requests,
)
from gpubus_local.sim.objects import now
from gpubus_local.sim.scheduling_queue import BackoffPolicy, Clock, SchedulingQueue
from shared.kube import KubeApi, KubeError, list_and_watch_nodes, list_and_watch_pods
from shared.kube_types import Node, NodeWatchEvent, Pod, PodCondition, PodWatchEvent
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_TERMINAL = frozenset({"Succeeded", "Failed"})


class SchedulerKube(KubeApi, EventSink, Protocol):
    """What the stand-in needs beyond ``KubeApi``: writing the PodScheduled condition, and events."""

    async def patch_pod_status(self, namespace: str, name: str, merge_patch: dict[str, Any]) -> Pod: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerSettings:
    scheduler_name: str = "gpubus-scheduler"
    """Pods whose ``spec.schedulerName`` is this are ours (the webhook sets it)."""
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    fit_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    """Extended resources checked as NodeResourcesFit does: the node's allocatable minus what its
    bound (and assumed) non-terminal pods request. HAMi's scheduler config marks ``nvidia.com/gpu``
    ``ignoredByScheduler``, so a real kube-scheduler leaves it to the extender; but the kubelet's
    admission enforces allocatable anyway, so a node it would refuse (allocatable 0 while the device
    plugin re-registers after a kubelet restart) only turns a bind into ``UnexpectedAdmissionError``.
    The stand-in checks it to schedule as that admission would; ``()`` is strictly HAMi's behaviour."""
    events: RecorderSettings = field(default_factory=RecorderSettings)
    """How its events are written (they come from ``scheduler_name``, as from a kube-scheduler profile)."""
    percentage_of_nodes_to_score: int = 0
    """kube-scheduler's ``percentageOfNodesToScore``: 0 is its adaptive default (see
    :func:`feasible_nodes_to_find`); 100 sends every feasible node to the extender."""
    plain_profiles: tuple[str, ...] = ()
    """Further scheduler names it schedules without extenders, as a kube-scheduler's other profiles
    (one that is ``scheduler_name`` as well is that profile, with extenders):
    `gpubus up` adds ``default-scheduler``, so pods without GPUs (which the webhook leaves to it) run."""


#: kube-scheduler's ``minFeasibleNodesToFind`` and ``minFeasibleNodesPercentageToFind``.
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def feasible_nodes_to_find(all_nodes: int, percentage: int = 0) -> int:
    """How many feasible nodes kube-scheduler's filters find before they stop (``numFeasibleNodesToFind``
    in ``pkg/scheduler/schedule_one.go``): every node under 100; else ``percentage`` of them (0:
    50 % less 1 % per 125 nodes, at least 5 %), at least 100. Only those reach the extender, so its
    ``/filter`` carries 100 names at 100 nodes, 420 at 1000 and 500 at 5000."""
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    if percentage == 0:
        percentage = max(50 - all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One finished scheduling attempt (what kube-scheduler would record as an Event)."""

    uid: str
    namespace: str
    name: str
    node: str | None
    reason: str
    """``Scheduled``, ``Unschedulable``, ``SchedulerError`` or ``BindingRejected``."""
    message: str


@dataclass(slots=True)
class SchedulerStats:
    attempts: int = 0
    scheduled: int = 0
    unschedulable: int = 0
    errors: int = 0
    bind_failures: int = 0


def _meta(pod: Pod) -> tuple[str, str, str]:
    meta = pod["metadata"]
    return meta["uid"], meta.get("namespace", ""), meta["name"]


class SimScheduler:
    """Run with ``start()``/``stop()`` (or ``await run()``)."""

    def __init__(
        self,
        kube: SchedulerKube,
        extenders: list[ExtenderConfig],
        settings: SchedulerSettings | None = None,
        *,
        on_outcome: Callable[[Outcome], None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.kube, self.settings = kube, settings or SchedulerSettings()
        self.extenders = [ExtenderClient(config) for config in extenders]
        self.queue = SchedulingQueue(self.settings.backoff, clock=clock)  # clock: the loop's, or a test's
        self.stats = SchedulerStats()
        self.synced = asyncio.Event()
        self._profiles = frozenset({self.settings.scheduler_name, *self.settings.plain_profiles})
        self._recorders = {name: EventRecorder(kube, {"component": name}, self.settings.events)
                           for name in sorted(self._profiles)}
        self._on_outcome = on_outcome
        self._pods: dict[str, Pod] = {}
        self._nodes: dict[str, Node] = {}
        self._assumed: set[str] = set()
        self._finished: set[str] = set()
        self._fit_names = frozenset(self.settings.fit_resources)
        self._plain: set[str] = set()
        self._allocatable: dict[str, Amounts] = {}
        self._placed: dict[str, tuple[str, Amounts]] = {}
        self._used: dict[str, Amounts] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._root: asyncio.Task[None] | None = None
        self._next_start = 0
        """Where the next cycle's filters start in the node list (kube-scheduler's ``nextStartNodeIndex``)."""

    # lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._root = asyncio.create_task(self.run(), name="sim-scheduler")

    async def stop(self) -> None:
        root, self._root = self._root, None
        await cancel_and_wait(root)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.queue.close()
        for client in self.extenders:
            await client.close()

    async def run(self) -> None:
        """Informers and the scheduling loop; if any of them dies, all stop and the error propagates."""
        pods_synced, nodes_synced = asyncio.Event(), asyncio.Event()
        async with asyncio.TaskGroup() as group:
            for name, recorder in self._recorders.items():
                group.create_task(recorder.run(), name=f"sim-scheduler-events-{name}")
            group.create_task(self._watch_pods(pods_synced), name="sim-scheduler-pods")
            group.create_task(self._watch_nodes(nodes_synced), name="sim-scheduler-nodes")
            await pods_synced.wait()
            await nodes_synced.wait()
            self.synced.set()
            group.create_task(self._schedule_loop(), name="sim-scheduler-loop")
            group.create_task(self._flush_leftover_loop(), name="sim-scheduler-leftover")

    # informers ------------------------------------------------------------------------

    async def _watch_pods(self, synced: asyncio.Event) -> None:
        async for event in list_and_watch_pods(self.kube, synced=synced, transform=self._slim):
            self._on_pod(event)

    def _slim(self, pod: dict[str, Any]) -> dict[str, Any]:
        """What the informer keeps of a pod: all of one we have to schedule (the extender gets it),
        of any other only what placement and resource fit read."""
        if self._ours_and_pending(cast(Pod, pod)):
            return pod
        meta, spec = pod["metadata"], pod.get("spec") or {}
        keep = ("namespace", "name", "uid", "resourceVersion", "deletionTimestamp")
        return {"metadata": {key: meta[key] for key in keep if key in meta},
                "spec": {"nodeName": spec.get("nodeName"), "schedulerName": spec.get("schedulerName"),
                         "containers": _resources_only(spec.get("containers")),
                         "initContainers": _resources_only(spec.get("initContainers"))},
                "status": {"phase": (pod.get("status") or {}).get("phase")}}

    async def _watch_nodes(self, synced: asyncio.Event) -> None:
        async for event in list_and_watch_nodes(self.kube, synced=synced):
            self._on_node(event)

    def _ours_and_pending(self, pod: Pod) -> bool:
        spec = pod.get("spec") or {}
        return (spec.get("schedulerName") in self._profiles and not spec.get("nodeName")
                and (pod.get("status") or {}).get("phase", "Pending") not in _TERMINAL
                and not pod["metadata"].get("deletionTimestamp"))

    def _on_pod(self, event: PodWatchEvent) -> None:
        pod = event["object"]
        uid = pod["metadata"]["uid"]
        if event["type"] == "DELETED":
            self._forget(uid)
            self._unplace(uid)
            self._finished.discard(uid)
            self._flush("pod deleted")
        elif self._ours_and_pending(pod):
            if uid not in self._assumed:
                old = self._pods.get(uid)
                self._pods[uid] = pod
                if old is not None and _pod_itself_changed(old, pod):
                    self.queue.updated(uid)  # kube-scheduler: an unschedulable pod's update requeues it
                self.queue.add(uid)
        else:
            self._forget(uid)
            self._track_placement(uid, pod)
            if (pod.get("status") or {}).get("phase") in _TERMINAL and uid not in self._finished:
                self._finished.add(uid)
                self._flush("pod finished")

    def _forget(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._assumed.discard(uid)
        self.queue.forget(uid)

    def _on_node(self, event: NodeWatchEvent) -> None:
        node = event["object"]
        name = node["metadata"]["name"]
        self._plain.discard(name)
        if event["type"] == "DELETED":
            self._nodes.pop(name, None)
            self._allocatable.pop(name, None)
        else:
            self._nodes[name] = node
            self._allocatable[name] = node_allocatable(node, self._fit_names)
            if is_plain(node):
                self._plain.add(name)
            self._flush(f"node {name} {event['type'].lower()}")

    # what bound and assumed pods use of each node (kube-scheduler's cache, for resource fit) ----

    def _track_placement(self, uid: str, pod: Pod) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in _TERMINAL:
            if self._placed.get(uid, ("",))[0] != node:
                self._place(uid, node, pod_requests(pod, self._fit_names))
        else:
            self._unplace(uid)

    def _place(self, uid: str, node: str, requests: Amounts) -> None:
        self._unplace(uid)
        if not requests:
            return
        self._placed[uid] = (node, requests)
        used = self._used.setdefault(node, {})
        for name, amount in requests.items():
            used[name] = used.get(name, 0) + amount

    def _unplace(self, uid: str) -> None:
        placed = self._placed.pop(uid, None)
        if placed is None:
            return
        node, requests = placed
        used = self._used[node]
        for name, amount in requests.items():
            used[name] -= amount

    def _flush(self, why: str) -> None:
        moved = self.queue.move_all_to_active_or_backoff()
        if moved:
            log.debug("%s: %d unschedulable pod(s) back to the active or backoff queue", why, moved)

    async def _flush_leftover_loop(self) -> None:
        """kube-scheduler's flushUnschedulablePodsLeftover: a periodic task, not a wait for an outcome."""
        while True:
            await asyncio.sleep(self.settings.backoff.leftover_check_s)
            moved = self.queue.flush_leftover()
            if moved:
                log.debug("%d pod(s) unschedulable too long without an event: retried", moved)

    # the scheduling cycle ------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while True:
            uid = await self.queue.pop()
            pod = self._pods.get(uid)
            if pod is None:
                self.queue.release(uid)
                continue
            await self.schedule_one(pod)

    async def schedule_one(self, pod: Pod) -> None:
        """One scheduling cycle: filter, prioritize, then hand the pod to a binding cycle."""
        self.stats.attempts += 1
        nodes, reasons = self._in_tree_filter(pod)
        interested = [client for client in self.extenders if client.config.interested_in(pod)
                      and _scheduler_name(pod) == self.settings.scheduler_name]
        try:
            for client in interested:
                if not nodes:
                    break
                nodes = await self._extender_filter(client, pod, nodes, reasons)
        except ExtenderError as e:
            self._failed(pod, "SchedulerError", str(e))
            return
        if not nodes:
            self._failed(pod, "Unschedulable", fit_error_message(len(self._nodes), reasons))
            return
        node = await self._select(pod, nodes, interested)
        uid = pod["metadata"]["uid"]
        self._assumed.add(uid)
        self._place(uid, node, pod_requests(pod, self._fit_names))
        self._spawn(self._bind(pod, node, interested), f"sim-scheduler-bind-{uid}")

    def _in_tree_filter(self, pod: Pod) -> tuple[list[Node], dict[str, str]]:
        nodes: list[Node] = []
        reasons: dict[str, str] = {}
        plain_pod = not (pod.get("spec") or {}).get("nodeSelector")
        requests = pod_requests(pod, self._fit_names)
        no_use: Amounts = {}
        names = list(self._nodes)
        wanted = feasible_nodes_to_find(len(names), self.settings.percentage_of_nodes_to_score)
        start, processed = self._next_start % max(len(names), 1), 0
        for i in range(len(names)):
            if len(nodes) >= wanted:
                break
            processed += 1
            name = names[(start + i) % len(names)]
            node = self._nodes[name]
            reason = None if plain_pod and name in self._plain else node_rejects(pod, node)
            if reason is None and requests:
                reason = insufficient(requests, self._allocatable[name], self._used.get(name, no_use))
            if reason is None:
                nodes.append(node)
            else:
                reasons[name] = reason
        self._next_start = (start + processed) % max(len(names), 1)
        return nodes, reasons

    async def _extender_filter(
        self, client: ExtenderClient, pod: Pod, nodes: list[Node], reasons: dict[str, str]
    ) -> list[Node]:
        try:
            result = await client.filter(pod, nodes)
        except ExtenderError:
            if client.config.ignorable:
                log.warning("ignorable extender %s failed; skipped", client.config.url_prefix)
                return nodes
            raise
        reasons.update(result.failed)
        reasons.update(result.unresolvable)
        keep = set(result.nodes)
        return [node for node in nodes if node["metadata"]["name"] in keep]

    async def _select(self, pod: Pod, nodes: list[Node], interested: list[ExtenderClient]) -> str:
        names = [node["metadata"]["name"] for node in nodes]
        if len(names) == 1:
            return names[0]
        totals = dict.fromkeys(names, 0)
        for client in interested:
            if not client.config.prioritize_verb:
                continue
            try:
                scores = await client.prioritize(pod, nodes)
            except ExtenderError as e:
                log.info("prioritize failed, scores ignored as kube-scheduler does: %s", e)
                continue
            for name, score in scores.items():
                if name in totals:
                    totals[name] += score
        best = max(totals.values())
        return random.choice([name for name, total in totals.items() if total == best])

    # the binding cycle ----------------------------------------------------------------------

    async def _bind(self, pod: Pod, node: str, interested: list[ExtenderClient]) -> None:
        uid, namespace, name = _meta(pod)
        binder = next((c for c in interested if c.config.bind_verb), None)
        try:
            if binder is not None:
                await binder.bind(pod, node)
            else:
                await self.kube.bind_pod(namespace, name, uid, node, {})
        except (ExtenderError, KubeError) as e:
            self._assumed.discard(uid)
            self._unplace(uid)
            self.stats.bind_failures += 1
            self._failed(pod, "BindingRejected", f"binding rejected: {e}")
            return
        self.queue.done(uid)
        self.stats.scheduled += 1
        self._report(pod, Outcome(uid=uid, namespace=namespace, name=name, node=node, reason="Scheduled",
                                  message=f"Successfully assigned {namespace}/{name} to {node}"))

    # failures ---------------------------------------------------------------------------------

    def _failed(self, pod: Pod, reason: str, message: str) -> None:
        uid, namespace, name = _meta(pod)
        if reason == "Unschedulable":
            self.stats.unschedulable += 1
        else:
            self.stats.errors += 1
        delay = self.queue.failed(uid, unschedulable=reason == "Unschedulable")
        log.info("pod %s/%s: %s: %s (retry in %.1fs)", namespace, name, reason, message, delay)
        self._report(pod, Outcome(uid=uid, namespace=namespace, name=name, node=None, reason=reason,
                                  message=message))
        condition_reason = "Unschedulable" if reason == "Unschedulable" else "SchedulerError"
        current = self._pods.get(uid, pod)
        patch = _scheduled_false(current, condition_reason, message)
        if patch is not None:
            self._spawn(self._patch_status(namespace, name, patch), f"sim-scheduler-condition-{uid}")

    async def _patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        try:
            await self.kube.patch_pod_status(namespace, name, patch)
        except KubeError as e:
            log.info("could not record PodScheduled=False on %s/%s: %s", namespace, name, e)

    def _report(self, pod: Pod, outcome: Outcome) -> None:
        recorder = self._recorders[_scheduler_name(pod)]  # a pod reaching here is one of our profiles
        if outcome.node is None:
            recorder.record(pod_reference(pod), "Warning", "FailedScheduling", truncate_note(outcome.message))
        elif recorder.wants("Normal"):
            recorder.record(pod_reference(pod), "Normal", "Scheduled", outcome.message)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.stats.errors += 1
            log.error("%s failed", task.get_name(), exc_info=task.exception())


def _pod_itself_changed(old: Pod, new: Pod) -> bool:
    """kube-scheduler's isPodUpdated: anything but status, resourceVersion, generation and
    managedFields changed."""
    def strip(pod: Pod) -> dict[str, Any]:
        meta = {k: v for k, v in (pod.get("metadata") or {}).items()
                if k not in ("resourceVersion", "generation", "managedFields")}
        return {**{k: v for k, v in pod.items() if k not in ("status", "metadata")}, "metadata": meta}
    return strip(old) != strip(new)


def _scheduler_name(pod: Pod) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "")


def _resources_only(containers: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{"resources": c.get("resources") or {}} for c in containers or []]


def _scheduled_false(pod: Pod, reason: str, message: str) -> dict[str, Any] | None:
    """The status merge patch setting PodScheduled=False; None when the pod already says so."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and \
                condition.get("reason") == reason and condition.get("message") == message:
            return None
    scheduled: PodCondition = {"type": "PodScheduled", "status": "False", "reason": reason,
                               "message": message, "lastTransitionTime": now()}
    others = [c for c in conditions if c.get("type") != "PodScheduled"]
    return {"status": {"conditions": [*others, scheduled]}}
