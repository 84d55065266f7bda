"""Checking the kubelet's own record (pod resources API ``List``) against what we decided.

``compare`` is pure: for each GPU container of an allocation, the physical UUIDs of the replica
IDs the kubelet assigned must equal the decided UUIDs. ``VerifyQueue`` (pure, clock passed in)
schedules the checks with a doubling delay per attempt and hands out every check due within a
window together, so one ``List`` serves all pods a node allocated meanwhile instead of one
``List`` per pod. ``PodResourcesClient`` is the thin gRPC
adapter over the kubelet's pod resources socket; its errors become :class:`BusUnavailable`-like
``PodResourcesUnavailable``. :class:`Verifier` is the loop (an owned task of the agent) that runs
the due checks through the client, counts the outcomes and publishes ``allocation.mismatch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import grpc

from proto.podresources.v1 import api_pb2 as pr
from proto.podresources.v1 import api_pb2_grpc as pr_grpc
from services.node_agent.inventory import physical_uuid
from services.node_agent.metrics import NodeAgentMetrics
from shared.errors import Retryable
from shared.events import AllocationMismatch, Event
from shared.model import Allocation

log = logging.getLogger(__name__)

#: Checks of one allocation before the kubelet is taken never to list it.
VERIFY_ATTEMPTS = 6


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


class Verifier:
    """Completed allocations checked against the kubelet's record, one ``List`` per due batch."""

    def __init__(
        self,
        node: str,
        client: PodResourcesClient,
        metrics: NodeAgentMetrics,
        emit: Callable[[Event], None],
        *,
        delay_s: float,
    ) -> None:
        self._node = node
        self._client = client
        self._metrics = metrics
        self._emit = emit
        self._delay_s = delay_s
        self._queue = VerifyQueue(delay_s, VERIFY_ATTEMPTS)
        self._wakeup = asyncio.Event()

    def completed(self, allocation: Allocation) -> None:
        """Check this allocation ``delay_s`` from now (then again, doubling, while it is not listed)."""
        self._queue.add(allocation, asyncio.get_running_loop().time())
        self._wakeup.set()

    async def run(self) -> None:
        """Run the checks as they fall due, forever (orchestration)."""
        loop = asyncio.get_running_loop()
        window = self._delay_s / 2
        while True:
            due = self._queue.next_due()
            wake = self._wakeup.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake, None if due is None else max(0.0, due - loop.time()))
            self._wakeup.clear()
            checks = self._queue.take_due(loop.time(), window)
            if not checks:
                continue
            try:
                assigned: Assigned | None = await self._client.assigned()
            except PodResourcesUnavailable as e:
                log.info("verify on %s: %s", self._node, e)
                assigned = None
            for check in checks:
                mismatches = None if assigned is None else compare(check.allocation, assigned)
                if mismatches is not None:
                    self._verified(check.allocation, mismatches)
                elif not self._queue.retry(check, loop.time()):
                    self._metrics.verifications.labels(result="unlisted").inc()
                    log.info("verify %s/%s: the kubelet never listed the pod",
                             check.allocation.namespace, check.allocation.name)

    def _verified(self, allocation: Allocation, mismatches: list[Mismatch]) -> None:
        self._metrics.verifications.labels(result="mismatch" if mismatches else "ok").inc()
        for m in mismatches:
            self._metrics.mismatches.labels(where="pod_resources").inc()
            log.warning(
                "pod %s/%s container %s: kubelet assigned %s, decided %s",
                allocation.namespace,
                allocation.name,
                m.container,
                m.actual,
                m.expected,
            )
            self._emit(
                AllocationMismatch(
                    node=self._node,
                    pod_uid=allocation.pod_uid,
                    namespace=allocation.namespace,
                    name=allocation.name,
                    container=m.container,
                    expected=m.expected,
                    actual=m.actual,
                )
            )
