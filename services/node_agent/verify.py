"""Checking the kubelet's own record (pod resources API ``List``) against what we decided.

``compare`` is pure: for each GPU container of an allocation, the physical UUIDs of the replica
IDs the kubelet assigned must equal the decided UUIDs. ``VerifyQueue`` (pure, clock passed in)
schedules the checks with a doubling delay per attempt and hands out every check due within a
window together, so one ``List`` serves all pods a node allocated meanwhile instead of one
``List`` per pod. ``PodResourcesClient`` is the thin gRPC
adapter over the kubelet's pod resources socket; its errors become :class:`BusUnavailable`-like
``PodResourcesUnavailable``. Nothing here emits events; the caller decides.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

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


@dataclass(order=True, slots=True)
class Check:
    """One allocation waiting to be verified: ``attempt`` (0-based) falls due at ``due``."""

    due: float
    order: int
    allocation: Allocation = field(compare=False)
    attempt: int = field(default=0, compare=False)
    delay: float = field(default=0.0, compare=False)


class VerifyQueue:
    """Checks of completed allocations, due ``first_delay_s`` after completion, then doubling."""

    def __init__(self, first_delay_s: float, attempts: int) -> None:
        self._first = first_delay_s
        self._attempts = attempts
        self._heap: list[Check] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, allocation: Allocation, now: float) -> None:
        heapq.heappush(self._heap, Check(due=now + self._first, order=next(self._order),
                                         allocation=allocation, delay=self._first))

    def next_due(self) -> float | None:
        return self._heap[0].due if self._heap else None

    def take_due(self, now: float, window_s: float) -> list[Check]:
        """Every check due by ``now + window_s`` (a check a little early is as good as on time)."""
        taken = []
        while self._heap and self._heap[0].due <= now + window_s:
            taken.append(heapq.heappop(self._heap))
        return taken

    def retry(self, check: Check, now: float) -> bool:
        """Schedule the next attempt with twice the delay; False when the attempts are used up."""
        if check.attempt + 1 >= self._attempts:
            return False
        delay = check.delay * 2
        heapq.heappush(self._heap, Check(due=now + delay, order=next(self._order),
                                         allocation=check.allocation, attempt=check.attempt + 1, delay=delay))
        return True


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
