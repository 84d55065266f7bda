"""A kubelet stand-in that speaks the real gRPC protocols: device plugin Registration and pod resources.

It serves ``Registration`` on ``<plugin_dir>/kubelet.sock``, dials each registered plugin back,
follows ``ListAndWatch``, and admits pods the way the kubelet's device manager does: one
``Allocate`` per container, init containers first, devices of finished init containers reused
by later containers, ``GetPreferredAllocation`` consulted when the plugin advertises it (with
the already chosen devices as must-include). It records what it assigned and serves the pod
resources API v1 (``List``, ``GetAllocatableResources``, ``Get``). :meth:`restart` behaves like
a kubelet restart: every socket in the plugin dir is deleted and ``kubelet.sock`` re-created.
Admission errors read as the kubelet's: "Allocate failed due to <the device manager's error, a
plugin's in Go's ``rpc error: code = ... desc = ...`` form>, which is unexpected".

It is a peer, not a mock: it imports nothing from the services it talks to, only the protos.
Reused by ``gpubus sim`` for many nodes and pods, and by the node-agent's tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from proto.podresources.v1 import api_pb2 as pr
from proto.podresources.v1 import api_pb2_grpc as pr_grpc
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

VERSION = "v1beta1"
HEALTHY = "Healthy"
#: grpc-go's names of the status codes whose Python names do not title-case into them.
_GO_CODE_NAMES = {grpc.StatusCode.OK: "OK", grpc.StatusCode.CANCELLED: "Canceled"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SimContainer:
    name: str
    gpus: int = 0
    """Devices of the plugin's resource this container requests (0 = none)."""
    init: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SimPod:
    namespace: str
    name: str
    uid: str
    containers: tuple[SimContainer, ...]
    resource: str = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerAllocation:
    """What the plugin answered for one container."""

    container: str
    device_ids: tuple[str, ...]
    envs: dict[str, str]
    mounts: tuple[tuple[str, str, bool], ...]
    """(container path, host path, read only)."""


class AdmissionError(Exception):
    """The pod was rejected at admission (the kubelet's ``UnexpectedAdmissionError``)."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class _Device:
    health: str
    numa: tuple[int, ...]


@dataclass(slots=True)
class _Endpoint:
    resource: str
    socket: Path
    channel: grpc.aio.Channel
    stub: pb_grpc.DevicePluginStub
    options: pb.DevicePluginOptions
    devices: dict[str, _Device] = field(default_factory=dict)
    updates: int = 0
    task: asyncio.Task[None] | None = None


@dataclass(slots=True)
class _PodRecord:
    pod: SimPod
    containers: dict[str, tuple[str, ...]] = field(default_factory=dict)


class SimKubelet:
    """One node's kubelet: plugin registry, device accounting and the pod resources server."""

    def __init__(
        self, plugin_dir: Path, pod_resources_socket: Path | None = None, *, honor_preferred: bool = True
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.pod_resources_socket = pod_resources_socket
        self.honor_preferred = honor_preferred
        """False makes it pick devices ignoring GetPreferredAllocation (to exercise mismatches)."""
        self.registrations = 0
        self.registration_errors: list[str] = []
        self._endpoints: dict[str, _Endpoint] = {}
        self._pods: dict[str, _PodRecord] = {}
        self._servers: list[grpc.aio.Server] = []
        self._changed = asyncio.Condition()
        self._admit_lock = asyncio.Lock()

    @property
    def socket(self) -> Path:
        return self.plugin_dir / "kubelet.sock"

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        registration = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(_Registration(self), registration)
        registration.add_insecure_port(f"unix:{self.socket}")
        await registration.start()
        self._servers.append(registration)
        if self.pod_resources_socket is not None:
            self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
            lister = grpc.aio.server()
            pr_grpc.add_PodResourcesListerServicer_to_server(_PodResources(self), lister)
            lister.add_insecure_port(f"unix:{self.pod_resources_socket}")
            await lister.start()
            self._servers.append(lister)

    async def stop(self) -> None:
        for endpoint in list(self._endpoints.values()):
            await self._close_endpoint(endpoint)
        self._endpoints.clear()
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop(grace=None)

    async def restart(self) -> None:
        """As a kubelet restart: drop plugin connections, delete every socket, serve a new kubelet.sock."""
        await self.stop()
        for path in self.plugin_dir.glob("*.sock"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self.pod_resources_socket is not None:
            with contextlib.suppress(FileNotFoundError):
                self.pod_resources_socket.unlink()
        await self.start()
        await self._notify()

    # -- observation ---------------------------------------------------------------------------
    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until ``predicate()`` holds; it is re-checked on every registration and device update."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(predicate)

    def devices(self, resource: str = "nvidia.com/gpu") -> dict[str, str]:
        """Device ID -> health as last reported by the plugin's ListAndWatch."""
        endpoint = self._endpoints.get(resource)
        return {} if endpoint is None else {i: d.health for i, d in endpoint.devices.items()}

    def numa_of(self, device_id: str, resource: str = "nvidia.com/gpu") -> tuple[int, ...]:
        return self._endpoints[resource].devices[device_id].numa

    def updates(self, resource: str = "nvidia.com/gpu") -> int:
        endpoint = self._endpoints.get(resource)
        return 0 if endpoint is None else endpoint.updates

    def assigned(self, pod_uid: str) -> dict[str, tuple[str, ...]]:
        record = self._pods.get(pod_uid)
        return {} if record is None else dict(record.containers)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- registration (called by the servicer) -------------------------------------------------
    async def register(self, request: pb.RegisterRequest) -> str | None:
        """Validate and connect back to a plugin; returns an error message or None."""
        if request.version != VERSION:
            return f"unsupported device plugin version {request.version!r}"
        domain, sep, _ = request.resource_name.partition("/")
        if not sep or domain.endswith("kubernetes.io"):
            return f"invalid extended resource name {request.resource_name!r}"
        old = self._endpoints.pop(request.resource_name, None)
        if old is not None:
            await self._close_endpoint(old)
        socket = self.plugin_dir / request.endpoint
        channel = grpc.aio.insecure_channel(f"unix:{socket}")
        stub = pb_grpc.DevicePluginStub(channel)
        try:
            options = await stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        except grpc.aio.AioRpcError as e:
            await channel.close()
            return f"cannot reach plugin at {socket}: {e.code().name}"
        if options != request.options:
            # The kubelet acts on Register's options; a plugin answering differently is broken.
            await channel.close()
            return f"options in Register ({request.options}) differ from GetDevicePluginOptions ({options})"
        endpoint = _Endpoint(
            resource=request.resource_name, socket=socket, channel=channel, stub=stub, options=options
        )
        endpoint.task = asyncio.create_task(self._watch(endpoint), name=f"sim-kubelet-law-{socket.name}")
        self._endpoints[request.resource_name] = endpoint
        self.registrations += 1
        await self._notify()
        return None

    async def _watch(self, endpoint: _Endpoint) -> None:
        try:
            async for message in endpoint.stub.ListAndWatch(pb.Empty()):
                endpoint.devices = {
                    d.ID: _Device(health=d.health, numa=tuple(n.ID for n in d.topology.nodes))
                    for d in message.devices
                }
                endpoint.updates += 1
                await self._notify()
        except grpc.aio.AioRpcError as e:
            log.info("ListAndWatch of %s ended: %s", endpoint.resource, e.code().name)
        # As the kubelet: a plugin that went away leaves its devices unhealthy until it re-registers.
        for device in endpoint.devices.values():
            device.health = "Unhealthy"
        await self._notify()

    async def _close_endpoint(self, endpoint: _Endpoint) -> None:
        await cancel_and_wait(endpoint.task)
        await endpoint.channel.close()

    # -- admission -------------------------------------------------------------------------------
    async def admit(self, pod: SimPod) -> dict[str, ContainerAllocation]:
        """Allocate every GPU container of ``pod`` in kubelet order; :class:`AdmissionError` rejects it."""
        async with self._admit_lock:  # the kubelet admits pods one at a time
            record = _PodRecord(pod=pod)
            self._pods[pod.uid] = record
            try:
                return await self._admit(pod, record)
            except AdmissionError as e:
                del self._pods[pod.uid]
                raise AdmissionError(f"Allocate failed due to {e}, which is unexpected", e.code) from e

    async def _admit(self, pod: SimPod, record: _PodRecord) -> dict[str, ContainerAllocation]:
        endpoint = self._endpoints.get(pod.resource)
        ordered = [c for c in pod.containers if c.init] + [c for c in pod.containers if not c.init]
        reusable: set[str] = set()
        result: dict[str, ContainerAllocation] = {}
        for container in ordered:
            if container.gpus <= 0:
                continue
            if endpoint is None:
                raise AdmissionError(f"no device plugin registered for {pod.resource}")
            ids = await self._choose(endpoint, container.gpus, reusable)
            result[container.name] = await self._allocate(endpoint, container.name, ids)
            record.containers[container.name] = ids
            if container.init:
                reusable |= set(ids)
            else:
                reusable -= set(ids)
        return result

    def _in_use(self, resource: str) -> set[str]:
        """Every device held by any admitted container (this pod's earlier containers included)."""
        return {
            i
            for rec in self._pods.values()
            if rec.pod.resource == resource
            for ids in rec.containers.values()
            for i in ids
        }

    async def _choose(self, endpoint: _Endpoint, needed: int, reusable: set[str]) -> tuple[str, ...]:
        chosen = sorted(reusable)[:needed]
        if len(chosen) == needed:
            return tuple(chosen)
        in_use = self._in_use(endpoint.resource)
        available = sorted(
            i
            for i, d in endpoint.devices.items()
            if d.health == HEALTHY and i not in in_use and i not in chosen
        )
        if len(available) < needed - len(chosen):
            raise AdmissionError(
                f"requested number of devices unavailable for {endpoint.resource}. "
                f"Requested: {needed}, Available: {len(available) + len(chosen)}"
            )
        if endpoint.options.get_preferred_allocation_available:
            preferred = await self._preferred(endpoint, available, chosen, needed)
            if self.honor_preferred:
                chosen += [i for i in preferred if i in available and i not in chosen][: needed - len(chosen)]
        chosen += [i for i in available if i not in chosen][: needed - len(chosen)]
        return tuple(chosen)

    async def _preferred(
        self, endpoint: _Endpoint, available: list[str], must: list[str], size: int
    ) -> list[str]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available + must, must_include_deviceIDs=must, allocation_size=size
                )
            ]
        )
        try:
            response = await endpoint.stub.GetPreferredAllocation(request, timeout=30)
        except grpc.aio.AioRpcError as e:
            raise AdmissionError(f"device plugin GetPreferredAllocation rpc failed with err: {_rpc_error(e)}",
                                 e.code()) from e
        if not response.container_responses:
            return []
        return list(response.container_responses[0].deviceIDs)

    async def _allocate(
        self, endpoint: _Endpoint, container: str, ids: tuple[str, ...]
    ) -> ContainerAllocation:
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])
        try:
            response = await endpoint.stub.Allocate(request, timeout=30)
        except grpc.aio.AioRpcError as e:
            raise AdmissionError(_rpc_error(e), e.code()) from e
        if len(response.container_responses) != 1:
            raise AdmissionError(
                f"Allocate returned {len(response.container_responses)} responses for 1 request"
            )
        answer = response.container_responses[0]
        return ContainerAllocation(
            container=container,
            device_ids=ids,
            envs=dict(answer.envs),
            mounts=tuple((m.container_path, m.host_path, m.read_only) for m in answer.mounts),
        )

    def remove(self, pod_uid: str) -> None:
        """The pod is gone: its devices are free again."""
        self._pods.pop(pod_uid, None)

    # -- pod resources (called by the servicer) --------------------------------------------------
    def pod_resources(self, record: _PodRecord) -> pr.PodResources:
        containers = []
        for c in record.pod.containers:
            ids = record.containers.get(c.name, ())
            devices = (
                [pr.ContainerDevices(resource_name=record.pod.resource, device_ids=list(ids))] if ids else []
            )
            containers.append(pr.ContainerResources(name=c.name, devices=devices))
        return pr.PodResources(name=record.pod.name, namespace=record.pod.namespace, containers=containers)

    def list_pods(self) -> list[pr.PodResources]:
        return [self.pod_resources(r) for r in self._pods.values() if r.containers]

    def find_pod(self, namespace: str, name: str) -> _PodRecord | None:
        return next(
            (r for r in self._pods.values() if (r.pod.namespace, r.pod.name) == (namespace, name)), None
        )

    def allocatable(self) -> list[pr.ContainerDevices]:
        return [
            pr.ContainerDevices(
                resource_name=e.resource,
                device_ids=sorted(i for i, d in e.devices.items() if d.health == HEALTHY),
            )
            for e in self._endpoints.values()
        ]


def _rpc_error(e: grpc.aio.AioRpcError) -> str:
    """A failed call as grpc-go's status error prints it."""
    code = _GO_CODE_NAMES.get(e.code()) or e.code().name.title().replace("_", "")
    return f"rpc error: code = {code} desc = {e.details()}"


class _Registration(pb_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, kubelet: SimKubelet) -> None:
        self._kubelet = kubelet

    async def Register(self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext) -> pb.Empty:
        error = await self._kubelet.register(request)
        if error is not None:
            self._kubelet.registration_errors.append(error)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error)
        return pb.Empty()


class _PodResources(pr_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, kubelet: SimKubelet) -> None:
        self._kubelet = kubelet

    async def List(
        self, request: pr.ListPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        return pr.ListPodResourcesResponse(pod_resources=self._kubelet.list_pods())

    async def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse(devices=self._kubelet.allocatable())

    async def Get(
        self, request: pr.GetPodResourcesRequest, context: grpc.aio.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        record = self._kubelet.find_pod(request.pod_namespace, request.pod_name)
        if record is not None:
            return pr.GetPodResourcesResponse(pod_resources=self._kubelet.pod_resources(record))
        await context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_name} not found in namespace {request.pod_namespace}",
        )
        raise AssertionError("unreachable: abort raises")
