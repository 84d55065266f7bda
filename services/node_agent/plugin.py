"""The kubelet device plugin servicer (v1beta1): decode, call the handoff, encode, map errors.

Every method is a screenful at most. Errors become ``grpc.StatusCode`` in one table
(:data:`STATUS`); messages are the operator-readable ones the handoff raised. It owns the
protobuf encoding of ListAndWatch and Allocate answers and nothing else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Container

import grpc

from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from services.node_agent.advertised import Advertised, Snapshot
from services.node_agent.allocate import ContainerResponse
from services.node_agent.errors import (
    AllocateFailed,
    AmbiguousDecision,
    BadAllocateRequest,
    DecisionMismatch,
    NoDecision,
)
from services.node_agent.handoff import Handoff
from services.node_agent.metrics import NodeAgentMetrics
from shared.errors import GpubusError, clip

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

#: Node-agent error -> gRPC status (most specific first).
STATUS: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (BadAllocateRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (AmbiguousDecision, grpc.StatusCode.ABORTED),
    (DecisionMismatch, grpc.StatusCode.FAILED_PRECONDITION),
    (NoDecision, grpc.StatusCode.FAILED_PRECONDITION),
    (AllocateFailed, grpc.StatusCode.INTERNAL),
)


def status_for(error: Exception) -> grpc.StatusCode:
    return next((code for cls, code in STATUS if isinstance(error, cls)), grpc.StatusCode.INTERNAL)


def options(preferred: bool) -> pb.DevicePluginOptions:
    return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=preferred)


def list_response(snapshot: Snapshot) -> pb.ListAndWatchResponse:
    devices = []
    for r in snapshot.replicas:
        device = pb.Device(ID=r.id, health=HEALTHY if r.healthy else UNHEALTHY)
        if r.numa is not None:
            device.topology.nodes.add(ID=r.numa)
        devices.append(device)
    return pb.ListAndWatchResponse(devices=devices)


def preferred_request_problem(
    req: pb.ContainerPreferredAllocationRequest, known: Container[str]
) -> str | None:
    """Why a GetPreferredAllocation container request makes no sense (None when it does).

    ``known``: every replica ID this node advertised. The kubelet offers only those, and its
    must-include IDs are among the available ones; anything else would be echoed as our preference.
    """
    ids = [*req.available_deviceIDs, *req.must_include_deviceIDs]
    unknown = next((i for i in ids if i not in known), None)
    if unknown is not None:
        return f"unknown device id {clip(unknown)!r}: not advertised by this node"
    must_ids = list(req.must_include_deviceIDs)
    if len(set(must_ids)) != len(must_ids):
        return f"duplicate must-include device ids in {clip(str(must_ids))}"
    offered = set(req.available_deviceIDs)
    stray = next((i for i in must_ids if i not in offered), None)
    if stray is not None:
        return f"must-include device {clip(stray)!r} is not among the available devices"
    size, available, must = req.allocation_size, len(offered), len(must_ids)
    if size <= 0 or size > available:
        return f"allocation size {size} with {available} available devices"
    if must > size:
        return f"{must} must-include devices for an allocation of {size}"
    return None


def container_response(response: ContainerResponse) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(response.envs),
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in response.mounts
        ],
    )


class DevicePluginServicer(pb_grpc.DevicePluginServicer):  # type: ignore[misc]
    """One node's device plugin; several servers (after kubelet restarts) may share it."""

    def __init__(
        self, advertised: Advertised, handoff: Handoff, metrics: NodeAgentMetrics, *, preferred: bool
    ) -> None:
        self._advertised = advertised
        self._handoff = handoff
        self._metrics = metrics
        self.options = options(preferred)
        """Sent in Register and returned by GetDevicePluginOptions: one value, so they never differ."""

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> pb.DevicePluginOptions:
        return self.options

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        generation = -1
        while True:
            snapshot = await self._advertised.changed(generation)
            generation = snapshot.generation
            yield list_response(snapshot)

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        answers = []
        for req in request.container_requests:
            problem = preferred_request_problem(req, self._advertised.uuid_of)
            if problem is not None:
                self._metrics.bad_requests.labels(method="GetPreferredAllocation").inc()
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
            ids = await self._handoff.preferred(
                list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
            )
            answers.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=answers)

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocateResponse:
        started = time.perf_counter()
        try:
            if not request.container_requests:
                raise BadAllocateRequest("Allocate without container requests")
            requests = [list(c.devices_ids) for c in request.container_requests]
            answers = [container_response(r) for r in await self._handoff.allocate(requests)]
        except GpubusError as e:
            if isinstance(e, BadAllocateRequest):
                self._metrics.bad_requests.labels(method="Allocate").inc()
            await context.abort(status_for(e), str(e))
        finally:
            self._metrics.allocate_seconds.observe(time.perf_counter() - started)
        return pb.AllocateResponse(container_responses=answers)

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
