"""One simulated node's kubelet side: the kubelet stand-in plus the pod lifecycle the kubelet runs.

A :class:`SimNode` registers its ``Node`` object (capacity from what the device plugin advertises),
serves a :class:`~gpubus_local.sim.kubelet.SimKubelet` (device plugin registration, pod resources API)
and watches the pods bound to its node. For each new pod it runs the kubelet's admission path —
GetPreferredAllocation and Allocate per container, init containers first — then marks the pod
Running through the ``pods/status`` subresource, and Succeeded when its ``gpubus.io/sim-duration``
annotation (or the default) expires, freeing its devices; pods found Running when it starts (a
restarted simulator) are finished on the same schedule. A pod whose Allocate fails becomes
Failed with reason ``UnexpectedAdmissionError``, as the kubelet does. It records the kubelet's
events, from ``kubelet`` on its node: ``UnexpectedAdmissionError`` (Warning) with the admission
error, and ``Started`` (Normal) "Started container NAME" for each container it starts. With a pod log
directory it keeps each container's log as the kubelet does (``log_files``): what the container
printed at its start, built from what Allocate answered (``pod_logs.start_lines``), and its exit line
when it ends; a deleted pod's logs go with it.

It talks to the API server through the ``SimNodeKube`` port and to the device plugin over gRPC;
it knows nothing about gpubus's services, the bus or the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpubus_local.sim import pod_logs, rfc3339
from gpubus_local.sim.events import EventRecorder, EventSink, RecorderSettings, pod_reference
from gpubus_local.sim.kubelet import AdmissionError, ContainerAllocation, SimContainer, SimKubelet, SimPod
from gpubus_local.sim.log_files import PodLogFiles
from shared.errors import GpubusError
from shared.kube import Conflict, KubeApi, NotFound, list_and_watch_pods
from shared.kube_types import Container, Node, Pod
from shared.lifetime import FatalCallback, TaskSet
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

DURATION_ANNOTATION = "gpubus.io/sim-duration"
ADMISSION_FAILED = "UnexpectedAdmissionError"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_FOREVER = ("inf", "never", "forever")


class SimNodeKube(KubeApi, EventSink, Protocol):
    """The API server calls a kubelet makes beyond :class:`KubeApi` (events included)."""

    async def patch_pod_status(self, namespace: str, name: str, merge_patch: dict[str, Any]) -> Pod: ...

    async def get_node(self, name: str) -> Node | None: ...

    async def create_node(self, node: Node) -> Node: ...

    async def patch_node_status(self, name: str, merge_patch: dict[str, Any]) -> Node: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SimNodeSettings:
    """One simulated node."""

    node: str
    plugin_dir: Path
    """Where ``kubelet.sock`` and the device plugin's socket live (keep the path short: unix sockets)."""
    pod_resources_socket: Path
    resource_name: str = "nvidia.com/gpu"
    default_duration_s: float | None = 30.0
    """How long a pod runs without the duration annotation, seconds; None = until deleted."""
    labels: dict[str, str] = field(default_factory=dict)
    host_ip: str = "10.0.0.1"
    events: RecorderSettings = field(default_factory=RecorderSettings)
    log_dir: Path | None = None
    """The pod log directory (a node's ``/var/log/pods``); None: no container logs are kept."""
    gpu_names: Mapping[str, str] = field(default_factory=dict)
    """GPU UUID -> model name, as ``nvidia-smi -L`` inside a container names the GPUs it sees."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Admitted:
    """What the kubelet got from Allocate for one pod (for checks: the limits a container received)."""

    node: str
    namespace: str
    name: str
    uid: str
    containers: dict[str, ContainerAllocation]


def parse_duration(text: str | None, default: float | None) -> float | None:
    """``30s``/``2m``/``500ms``/``10`` -> seconds; ``inf``/``never`` -> None (run until deleted)."""
    if text is None:
        return default
    if text.strip().lower() in _FOREVER:
        return None
    m = _DURATION.match(text)
    if m is None:
        log.warning("%s=%r is not a duration like 30s; using the default", DURATION_ANNOTATION, text)
        return default
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _quantity(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _gpus(container: Container, resource: str) -> int:
    res = container.get("resources") or {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    return _quantity(limits.get(resource) or requests.get(resource) or 0)


def sim_pod(pod: Pod, resource: str) -> SimPod:
    """The kubelet's view of a pod: per container how many devices of ``resource`` it asks for."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    containers = [SimContainer(name=c.get("name", ""), gpus=_gpus(c, resource), init=True)
                  for c in spec.get("initContainers") or []]
    containers += [SimContainer(name=c.get("name", ""), gpus=_gpus(c, resource))
                   for c in spec.get("containers") or []]
    return SimPod(namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
                  containers=tuple(containers), resource=resource)


def _now() -> str:
    return rfc3339.format_time(time.time_ns())


def _started_s(text: str | None) -> float:
    """When a pod started, unix seconds, from its ``startTime``; now when absent or malformed."""
    ns = rfc3339.parse_ns(text or "")
    return time.time() if ns is None else ns / rfc3339.NS_PER_S


def _conditions(ready: bool, now: str) -> list[dict[str, str]]:
    flag = "True" if ready else "False"
    return [{"type": t, "status": s, "lastTransitionTime": now} for t, s in
            (("PodScheduled", "True"), ("Initialized", "True"), ("ContainersReady", flag), ("Ready", flag))]


def _container_status(pod: SimPod, name: str, *, ready: bool, started: bool,
                      state: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ready": ready, "started": started, "restartCount": 0, "image": "sim",
            "imageID": "", "containerID": f"sim://{pod.uid}/{name}", "state": state}


def _completed(pod: SimPod, name: str, now: str, *, started_at: bool) -> dict[str, Any]:
    """A ``terminated`` state with exit code 0; ``started_at``: it also says when it started (now)."""
    terminated = {"exitCode": 0, "reason": "Completed", **({"startedAt": now} if started_at else {}),
                  "finishedAt": now, "containerID": f"sim://{pod.uid}/{name}"}
    return {"terminated": terminated}


def running_status(pod: SimPod, host_ip: str) -> dict[str, Any]:
    now = _now()
    running = {"running": {"startedAt": now}}
    statuses = [_container_status(pod, c.name, ready=True, started=True, state=running)
                for c in pod.containers if not c.init]
    status = {"phase": "Running", "conditions": _conditions(True, now), "hostIP": host_ip,
              "podIP": host_ip, "startTime": now, "containerStatuses": statuses}
    inits = [_container_status(pod, c.name, ready=True, started=False,
                               state=_completed(pod, c.name, now, started_at=True))
             for c in pod.containers if c.init]
    if inits:  # they ran to completion before the others started
        status["initContainerStatuses"] = inits
    return {"status": status}


def succeeded_status(pod: SimPod) -> dict[str, Any]:
    now = _now()
    statuses = [_container_status(pod, c.name, ready=False, started=False,
                                  state=_completed(pod, c.name, now, started_at=False))
                for c in pod.containers if not c.init]
    return {"status": {"phase": "Succeeded", "conditions": _conditions(False, now),
                       "containerStatuses": statuses}}


def failed_status(message: str) -> dict[str, Any]:
    return {"status": {"phase": "Failed", "reason": ADMISSION_FAILED,
                       "message": f"Pod was rejected: {message}"}}


class SimNode:
    """A node's kubelet: :meth:`start`, :meth:`stop`, and :meth:`restart_kubelet` for fault tests."""

    def __init__(self, settings: SimNodeSettings, kube: SimNodeKube, *,
                 on_admitted: Callable[[Admitted], None] | None = None,
                 on_fatal: FatalCallback | None = None) -> None:
        self.settings = settings
        self.node = settings.node
        self.kube = kube
        self.kubelet = SimKubelet(settings.plugin_dir, settings.pod_resources_socket)
        self.events = EventRecorder(kube, {"component": "kubelet", "host": settings.node}, settings.events)
        self.logs = PodLogFiles(settings.log_dir) if settings.log_dir is not None else None
        self._on_admitted = on_admitted
        self._pods: dict[str, asyncio.Task[None]] = {}
        self._tasks = TaskSet(f"sim-node/{self.node}", on_fatal)
        """The node's loops: one that ends stops the simulated node (``on_fatal``)."""
        self.synced = asyncio.Event()
        self.admitted = 0
        self.failed = 0

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.kubelet.start()
        await self._register_node()
        self._tasks.spawn("events", self.events.run(), root=True)
        self._tasks.spawn("pods", self._watch_pods(), root=True)
        self._tasks.spawn("capacity", self._capacity_loop(), root=True)

    async def stop(self) -> None:
        pods, self._pods = list(self._pods.values()), {}
        await self._tasks.close()
        await cancel_and_wait(*pods)
        await self.kubelet.stop()

    async def restart_kubelet(self) -> None:
        """As a kubelet restart: sockets deleted and re-created, plugins must register again."""
        await self.kubelet.restart()

    # -- the Node object ---------------------------------------------------------------------------
    def _node_object(self) -> Node:
        labels = {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux", "gpu": "on",
                  **self.settings.labels}
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node, "labels": labels}}

    def _status(self, gpus: int) -> dict[str, Any]:
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "1000", self.settings.resource_name: str(gpus)}
        now = _now()
        return {"status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "simulated kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": self.settings.host_ip},
                          {"type": "Hostname", "address": self.node}],
            "nodeInfo": {"kubeletVersion": "v1.33.0-gpubus-sim", "operatingSystem": "linux",
                         "architecture": "amd64"}}}

    async def _register_node(self) -> None:
        with contextlib.suppress(Conflict):
            await self.kube.create_node(self._node_object())
        await self.kube.patch_node_status(self.node, self._status(0))

    def _healthy(self) -> int:
        return sum(h == "Healthy" for h in self.kubelet.devices(self.settings.resource_name).values())

    async def _capacity_loop(self) -> None:
        """Node capacity follows the plugin's healthy devices, as the kubelet's device manager does."""
        posted = 0
        while True:
            healthy = self._healthy()
            if healthy != posted:
                try:
                    await self.kube.patch_node_status(self.node, self._status(healthy))
                    posted = healthy
                except GpubusError as e:
                    log.warning("node %s: capacity not posted, retrying: %s", self.node, e)
                    await asyncio.sleep(1.0)
                    continue
            with contextlib.suppress(TimeoutError):
                await self.kubelet.wait_for(lambda: self._healthy() != posted, timeout=3600.0)  # noqa: B023

    # -- pods --------------------------------------------------------------------------------------
    async def _watch_pods(self) -> None:
        selector = f"spec.nodeName={self.node}"
        async for event in list_and_watch_pods(self.kube, field_selector=selector, synced=self.synced):
            pod = event["object"]
            uid = (pod.get("metadata") or {}).get("uid", "")
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if event["type"] == "DELETED" or phase in ("Succeeded", "Failed"):
                self._forget(uid)
                if event["type"] == "DELETED" and self.logs is not None:
                    self._remove_logs(pod)
            elif uid not in self._pods and phase in ("Pending", "Running"):
                run = self._run_pod(pod) if phase == "Pending" else self._resume_pod(pod)
                self._pods[uid] = asyncio.create_task(run, name=f"sim-pod/{self.node}/{uid}")

    def _forget(self, uid: str) -> None:
        task = self._pods.pop(uid, None)
        if task is not None and not task.done():
            task.cancel()
        self.kubelet.remove(uid)

    async def _run_pod(self, pod: Pod) -> None:
        """Admit, run for the pod's duration, finish. Cancelled when the pod is deleted."""
        simpod = sim_pod(pod, self.settings.resource_name)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            allocations = await self.kubelet.admit(simpod)
        except AdmissionError as e:
            self.failed += 1
            log.info("pod %s/%s rejected at admission on %s: %s", simpod.namespace, simpod.name, self.node, e)
            self.events.record(pod_reference(pod), "Warning", ADMISSION_FAILED, str(e))
            await self._patch(simpod, failed_status(str(e)))
            return
        self.admitted += 1
        if self._on_admitted is not None:
            self._on_admitted(Admitted(node=self.node, namespace=simpod.namespace, name=simpod.name,
                                       uid=simpod.uid, containers=allocations))
        self._record_started(pod, simpod)
        self._log_started(simpod, allocations)
        await self._patch(simpod, running_status(simpod, self.settings.host_ip))
        duration = parse_duration(annotations.get(DURATION_ANNOTATION), self.settings.default_duration_s)
        if duration is None:
            return
        await asyncio.sleep(duration)
        self._log_exited(simpod)
        await self._patch(simpod, succeeded_status(simpod))
        self.kubelet.remove(simpod.uid)

    def _record_started(self, pod: Pod, simpod: SimPod) -> None:
        """The kubelet's ``Started`` event of each container, init containers first as they run."""
        if not self.events.wants("Normal"):
            return
        for c in simpod.containers:
            where = f"spec.{'initContainers' if c.init else 'containers'}{{{c.name}}}"
            self.events.record(pod_reference(pod, where), "Normal", "Started", f"Started container {c.name}")

    async def _resume_pod(self, pod: Pod) -> None:
        """A pod already Running when this kubelet started (a restarted simulator): finish it on time."""
        simpod = sim_pod(pod, self.settings.resource_name)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        duration = parse_duration(annotations.get(DURATION_ANNOTATION), self.settings.default_duration_s)
        if duration is None:
            return
        started = _started_s((pod.get("status") or {}).get("startTime"))
        await asyncio.sleep(max(0.0, started + duration - time.time()))
        self._log_exited(simpod)
        await self._patch(simpod, succeeded_status(simpod))

    # -- container logs ----------------------------------------------------------------------------
    def _log_started(self, pod: SimPod, allocations: Mapping[str, ContainerAllocation]) -> None:
        """What each container printed as it started; init containers have finished by then."""
        if self.logs is None:
            return
        now = time.time_ns()
        for c in pod.containers:
            got = allocations.get(c.name)
            lines = pod_logs.start_lines(node=self.node, namespace=pod.namespace, pod=pod.name,
                                         container=c.name, envs=got.envs if got else {},
                                         mounts=got.mounts if got else (), gpu_names=self.settings.gpu_names)
            if c.init:
                lines.append(pod_logs.exit_line(c.name))
            self.logs.write(pod.namespace, pod.name, pod.uid, c.name, lines=lines, time_ns=now, new=True)

    def _log_exited(self, pod: SimPod) -> None:
        """Written before the status says the containers ended: a follower that sees it has the last line."""
        if self.logs is None:
            return
        now = time.time_ns()
        for c in pod.containers:
            if not c.init:
                self.logs.write(pod.namespace, pod.name, pod.uid, c.name, lines=[pod_logs.exit_line(c.name)],
                                time_ns=now)

    def _remove_logs(self, pod: Pod) -> None:
        assert self.logs is not None
        simpod = sim_pod(pod, self.settings.resource_name)
        self.logs.remove(simpod.namespace, simpod.name, simpod.uid, [c.name for c in simpod.containers])

    async def _patch(self, pod: SimPod, status: dict[str, Any]) -> None:
        try:
            await self.kube.patch_pod_status(pod.namespace, pod.name, status)
        except NotFound:
            log.debug("pod %s/%s is gone", pod.namespace, pod.name)
        except GpubusError as e:
            log.warning("pod %s/%s: status %s not written: %s", pod.namespace, pod.name,
                        status["status"]["phase"], e)
