"""Checking the kubelet's own record (pod resources API ``List``) against what we decided.

``compare`` is pure: for each GPU container of an allocation, the physical UUIDs of the replica
IDs the kubelet assigned must equal the decided UUIDs. ``PodResourcesClient`` is the thin gRPC
adapter over the kubelet's pod resources socket; its errors become :class:`BusUnavailable`-like
``PodResourcesUnavailable``. Nothing here emits events; the caller decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from proto.podresources.v1 import api_pb2 as pr
from proto.podresources.v1 import api_pb2_grpc as pr_grpc
from services.node_agent.inventory import physical_uuid
from shared.errors import Retryable
from shared.model import Allocation


class PodResourcesUnavailable(Retryable):
    """The kubelet's pod resources API did not answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    container: str
    expected: tuple[str, ...]
    """Decided physical UUIDs, sorted."""
    actual: tuple[str, ...]
    """Physical UUIDs of the replica IDs the kubelet assigned, sorted."""


#: (namespace, pod name) -> container name -> device IDs of our resource.
Assigned = Mapping[tuple[str, str], Mapping[str, tuple[str, ...]]]


def compare(allocation: Allocation, assigned: Assigned) -> list[Mismatch] | None:
    """Mismatches per GPU container, ``[]`` when all agree, None when the kubelet does not list the pod."""
    containers = assigned.get((allocation.namespace, allocation.name))
    if containers is None:
        return None
    mismatches = []
    for name, devices in zip(allocation.containers, allocation.devices, strict=True):
        if not devices:
            continue
        expected = tuple(sorted(d.uuid for d in devices))
        actual = tuple(sorted(physical_uuid(i) for i in containers.get(name, ())))
        if expected != actual:
            mismatches.append(Mismatch(container=name, expected=expected, actual=actual))
    return mismatches


class PodResourcesClient:
    """``List`` over the kubelet pod resources socket, filtered to one resource name."""

    def __init__(self, socket_path: str, resource_name: str, timeout_s: float = 2.0) -> None:
        self._channel = grpc.aio.insecure_channel(f"unix:{socket_path}")
        self._stub = pr_grpc.PodResourcesListerStub(self._channel)
        self._resource = resource_name
        self._timeout = timeout_s

    async def assigned(self) -> dict[tuple[str, str], dict[str, tuple[str, ...]]]:
        try:
            response = await self._stub.List(pr.ListPodResourcesRequest(), timeout=self._timeout)
        except grpc.aio.AioRpcError as e:
            raise PodResourcesUnavailable(f"pod resources List failed: {e.code().name}: {e.details()}") from e
        result: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
        for pod in response.pod_resources:
            result[(pod.namespace, pod.name)] = {
                c.name: tuple(i for d in c.devices if d.resource_name == self._resource for i in d.device_ids)
                for c in pod.containers
            }
        return result

    async def close(self) -> None:
        await self._channel.close()
