"""DRA mode's I/O: the kubelet plugin (registration + ``v1.DRAPlugin``), prepared claims on disk, and
the ResourceSlice publisher. The decisions are :mod:`services.node_agent.dra`'s.

The kubelet finds the plugin by its registration socket in ``plugins_registry``, asks GetInfo
(type ``DRAPlugin``, the driver name, the DRA service's socket, ``v1.DRAPlugin``), then calls
NodePrepareResources before a pod's containers start and NodeUnprepareResources once it is gone,
and retries both: each is idempotent. A prepared claim is a CDI spec in the CDI dir plus a state
file under the plugin dir, so a node-agent restart keeps it (and can still unprepare it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc

from proto.dra.v1 import api_pb2 as dra_pb
from proto.dra.v1 import api_pb2_grpc as dra_grpc
from proto.pluginregistration.v1 import api_pb2 as reg_pb
from proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from services.node_agent import dra
from services.node_agent.advertised import Advertised
from services.node_agent.allocate import AllocateConfig
from services.node_agent.grpc_bind import bind_unix
from services.node_agent.metrics import NodeAgentMetrics
from services.node_agent.settings import NodeAgentSettings
from shared.errors import clip
from shared.events import AllocationApplied, AllocationReleased, Event
from shared.kube import KubeClient
from shared.kube_errors import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)

DRA_SERVICE = "v1.DRAPlugin"
"""The DRA gRPC service version offered (k8s.io/kubelet/pkg/apis/dra/v1 ``DRAPluginService``)."""
PLUGIN_TYPE = "DRAPlugin"
RESOURCE_API = "/apis/resource.k8s.io/v1"
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class ClaimStore:
    """Prepared claims: ``<dir>/<claim uid>.json`` (what Prepare answered) next to its CDI spec."""

    def __init__(self, state_dir: Path, cdi_dir: Path, driver: str) -> None:
        self.state_dir, self.cdi_dir, self.driver = state_dir, cdi_dir, driver
        state_dir.mkdir(parents=True, exist_ok=True)
        cdi_dir.mkdir(parents=True, exist_ok=True)

    def _state(self, uid: str) -> Path:
        return self.state_dir / f"{uid}.json"

    def cdi_file(self, uid: str) -> Path:
        return self.cdi_dir / f"{self.driver}-{uid}.json"

    def get(self, uid: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = json.loads(self._state(uid).read_text())
        except FileNotFoundError:
            return None
        return found

    def uids(self) -> list[str]:
        return sorted(p.stem for p in self.state_dir.glob("*.json"))

    def put(self, uid: str, state: dict[str, Any], spec: dict[str, Any]) -> None:
        """CDI spec first, state last: a state file always has its spec."""
        _write_atomic(self.cdi_file(uid), spec)
        _write_atomic(self._state(uid), state)

    def remove(self, uid: str) -> None:
        self.cdi_file(uid).unlink(missing_ok=True)
        self._state(uid).unlink(missing_ok=True)


def _write_atomic(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


class DraService(dra_grpc.DRAPluginServicer):  # type: ignore[misc]
    """``v1.DRAPlugin``: NodePrepareResources / NodeUnprepareResources, one answer per claim."""

    def __init__(self, *, settings: NodeAgentSettings, advertised: Advertised, store: ClaimStore,
                 kube: KubeClient, config: AllocateConfig, metrics: NodeAgentMetrics,
                 emit: Callable[[Event], None]) -> None:
        self.settings, self.node = settings, settings.node_name
        self.advertised, self.store, self.kube, self.config = advertised, store, kube, config
        self.metrics, self.emit = metrics, emit
        self._lock = asyncio.Lock()

    async def NodePrepareResources(
        self, request: dra_pb.NodePrepareResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> dra_pb.NodePrepareResourcesResponse:
        answer = dra_pb.NodePrepareResourcesResponse()
        async with self._lock:
            for claim in request.claims:
                try:
                    devices = await self._prepare(claim)
                except (dra.BadClaim, KubeError, OSError, ValueError) as e:
                    self.metrics.allocations.labels(outcome="dra_prepare_failed").inc()
                    self.metrics.bad_requests.labels(method="NodePrepareResources").inc()
                    log.warning("prepare %s/%s (%s) failed: %s", claim.namespace, claim.name, claim.uid, e)
                    answer.claims[claim.uid].error = clip(f"gpubus: {e}")
                    continue
                answer.claims[claim.uid].devices.extend(devices)
        return answer

    async def _prepare(self, claim: dra_pb.Claim) -> list[dra_pb.Device]:
        if not _UID.fullmatch(claim.uid):
            raise dra.BadClaim(f"claim uid {clip(claim.uid)!r} is not a Kubernetes UID")
        done = self.store.get(claim.uid)
        if done is None:
            done = await self._prepare_new(claim)
        return [dra_pb.Device(request_names=d["requests"], pool_name=d["pool"], device_name=d["device"],
                              cdi_device_ids=d["cdi"], **({"share_id": d["share"]} if d["share"] else {}))
                for d in done["devices"]]

    async def _prepare_new(self, ref: dra_pb.Claim) -> dict[str, Any]:
        claim = await self.kube.request(
            f"get resourceclaim {ref.namespace}/{ref.name}", "GET",
            f"{RESOURCE_API}/namespaces/{ref.namespace}/resourceclaims/{ref.name}")
        if (claim.get("metadata") or {}).get("uid") != ref.uid:
            raise dra.BadClaim(f"claim {ref.namespace}/{ref.name} is not {ref.uid} (recreated?)")
        devices = dra.claim_devices(claim, node=self.node, devices=self.advertised.snapshot.devices,
                                    driver=self.settings.dra_driver)
        spec = dra.cdi_spec(ref.uid, devices, self.config, cache_id=uuid.uuid4().hex)
        cdi = [dra.cdi_device_id(ref.uid)]
        pods = dra.reserved_pods(claim)
        state = {
            "uid": ref.uid, "namespace": ref.namespace, "name": ref.name,
            "pods": [{"name": p.name, "uid": p.uid} for p in pods],
            # the claim's one CDI device carries every card's limits: it goes with the first device only
            "devices": [{"requests": [d.request], "pool": d.pool, "device": d.device, "share": d.share_id,
                         "uuid": d.uuid, "cdi": cdi if i == 0 else []} for i, d in enumerate(devices)],
        }
        self._cache_dir(ref.uid)
        self.store.put(ref.uid, state, spec)
        self.metrics.allocations.labels(outcome="dra_prepared").inc()
        log.info("prepared claim %s/%s (%s): %s", ref.namespace, ref.name, ref.uid,
                 ", ".join(f"{d.device} {d.memory_mib}MiB {d.cores}%" for d in devices))
        for pod in pods or (dra.ClaimRef(namespace=ref.namespace, name="", uid=""),):
            self.emit(AllocationApplied(
                node=self.node, pod_uid=pod.uid, namespace=ref.namespace, name=pod.name,
                container=f"claim/{ref.name}", device_ids=tuple(d.uuid for d in devices), complete=True))
        return state

    def _cache_dir(self, claim_uid: str) -> None:
        """HAMi-core's per-container cache dir, as Allocate makes it (best effort: the hook path
        may not be writable where no container ever runs)."""
        with contextlib.suppress(OSError):
            Path(self.config.hook_path, "vgpu", "containers", f"{claim_uid}_{dra.CACHE_CONTAINER}").mkdir(
                parents=True, exist_ok=True)

    async def NodeUnprepareResources(
        self, request: dra_pb.NodeUnprepareResourcesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> dra_pb.NodeUnprepareResourcesResponse:
        answer = dra_pb.NodeUnprepareResourcesResponse()
        async with self._lock:
            for claim in request.claims:
                answer.claims[claim.uid].SetInParent()
                if not _UID.fullmatch(claim.uid):
                    self.metrics.bad_requests.labels(method="NodeUnprepareResources").inc()
                    answer.claims[claim.uid].error = f"gpubus: claim uid {clip(claim.uid)!r} is not a UID"
                    continue
                state = self.store.get(claim.uid)
                try:
                    self.store.remove(claim.uid)
                except OSError as e:
                    answer.claims[claim.uid].error = clip(f"gpubus: {e}")
                    continue
                if state is None:
                    continue  # never prepared here, or already unprepared: done
                self.metrics.allocations.labels(outcome="dra_unprepared").inc()
                log.info("unprepared claim %s/%s (%s)", claim.namespace, claim.name, claim.uid)
                for pod in state.get("pods") or [{"name": "", "uid": ""}]:
                    self.emit(AllocationReleased(
                        node=self.node, pod_uid=pod["uid"], namespace=claim.namespace, name=pod["name"],
                        why=f"claim {claim.name} unprepared"))
        return answer


class Registration(reg_grpc.RegistrationServicer):  # type: ignore[misc]
    """The kubelet's plugin watcher asks who we are, then says whether it took us."""

    def __init__(self, driver: str, endpoint: Path, metrics: NodeAgentMetrics) -> None:
        self.driver, self.endpoint, self.metrics = driver, endpoint, metrics
        self.registered = asyncio.Event()

    async def GetInfo(
        self, request: reg_pb.InfoRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(type=PLUGIN_TYPE, name=self.driver, endpoint=str(self.endpoint),
                                 supported_versions=[DRA_SERVICE])

    async def NotifyRegistrationStatus(
        self, request: reg_pb.RegistrationStatus, context: grpc.aio.ServicerContext[Any, Any]
    ) -> reg_pb.RegistrationStatusResponse:
        if request.plugin_registered:
            self.metrics.registrations.labels(result="dra_ok").inc()
            log.info("the kubelet registered DRA driver %s", self.driver)
            self.registered.set()
        else:
            self.metrics.registrations.labels(result="dra_refused").inc()
            log.error("the kubelet refused DRA driver %s: %s", self.driver, request.error)
        return reg_pb.RegistrationStatusResponse()


class SlicePublisher:
    """Keeps the node's ResourceSlice equal to the advertised GPUs (and their health)."""

    def __init__(self, settings: NodeAgentSettings, advertised: Advertised, kube: KubeClient) -> None:
        self.node, self.driver = settings.node_name, settings.dra_driver
        self.advertised, self.kube = advertised, kube
        self.path = f"{RESOURCE_API}/resourceslices/{dra.slice_name(self.node, self.driver)}"
        self.generation = 0

    async def publish(self) -> None:
        """Create or update the slice; a new pool generation only when the devices changed."""
        for _ in range(5):
            try:
                current = await self.kube.request("get resourceslice", "GET", self.path)
            except NotFound:
                current = None
            generation = 1 if current is None else int(current["spec"]["pool"]["generation"])
            wanted = dra.resource_slice(self.node, self.advertised.snapshot.devices, generation, self.driver)
            if current is not None and dra.same_devices(current, wanted):
                self.generation = generation
                return
            try:
                if current is None:
                    await self.kube.request("create resourceslice", "POST", f"{RESOURCE_API}/resourceslices",
                                            wanted)
                else:
                    wanted["spec"]["pool"]["generation"] = generation + 1
                    wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    await self.kube.request("update resourceslice", "PUT", self.path, wanted)
            except Conflict:
                continue  # someone else wrote it meanwhile (or it already exists): read again
            self.generation = wanted["spec"]["pool"]["generation"]
            log.info("ResourceSlice %s: %d devices, generation %d", wanted["metadata"]["name"],
                     len(wanted["spec"]["devices"]), self.generation)
            return
        raise KubeError(f"ResourceSlice {self.path}: conflicting writes, gave up")

    async def run(self) -> None:
        """Publish now and after every change of the advertised devices (health included)."""
        seen = -1
        while True:
            snapshot = self.advertised.snapshot
            if snapshot.generation != seen:
                try:
                    await self.publish()
                    seen = snapshot.generation
                except KubeError as e:
                    log.warning("cannot publish the ResourceSlice now: %s", e)
                    await asyncio.sleep(2.0)
                    continue
            await self.advertised.changed(seen)


class DraPlugin:
    """Both gRPC servers on their sockets; ``async with`` serves, leaving removes the sockets."""

    def __init__(self, settings: NodeAgentSettings, service: DraService, metrics: NodeAgentMetrics) -> None:
        plugin_dir = Path(settings.dra_plugin_dir)
        self.dra_socket = plugin_dir / "dra.sock"
        self.registration_socket = Path(settings.dra_registry_dir) / f"{settings.dra_driver}-reg.sock"
        self.service = service
        self.registration = Registration(settings.dra_driver, self.dra_socket, metrics)
        self._servers: list[grpc.aio.Server] = []

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def start(self) -> None:
        # the DRA service first: the kubelet dials it as soon as it sees the registration socket
        sockets = ((self.dra_socket, self._add_dra), (self.registration_socket, self._add_registration))
        for socket, add in sockets:
            socket.parent.mkdir(parents=True, exist_ok=True)
            socket.unlink(missing_ok=True)
            server = bind_unix(socket, add, "DRA plugin")
            await server.start()
            self._servers.append(server)
        log.info("DRA plugin serving %s, registering at %s", self.dra_socket, self.registration_socket)

    async def wait_registered(self, timeout_s: float) -> bool:
        """Wait until the kubelet says it registered the plugin; False (logged) after ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.registration.registered.wait()
        except TimeoutError:
            log.warning("the kubelet has not registered DRA driver %s after %.0f s (is %s its"
                        " plugins_registry?); publishing the ResourceSlice anyway",
                        self.registration.driver, timeout_s, self.registration_socket.parent)
            return False
        return True

    def _add_dra(self, server: grpc.aio.Server) -> None:
        dra_grpc.add_DRAPluginServicer_to_server(self.service, server)

    def _add_registration(self, server: grpc.aio.Server) -> None:
        reg_grpc.add_RegistrationServicer_to_server(self.registration, server)

    async def stop(self) -> None:
        for server in reversed(self._servers):
            await server.stop(grace=None)
        self._servers.clear()
        for socket in (self.registration_socket, self.dra_socket):
            with contextlib.suppress(OSError):
                socket.unlink()
