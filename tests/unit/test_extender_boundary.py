"""The extender's one error boundary: a fault of ours is an answer in kube-scheduler's protocol.

Over a real aiohttp server on loopback, with the extender's collaborators faked at its own ports
(``Readiness``, ``PodBinder``, ``Leadership``, ``Forwarder``) so that each raises a bug: filter and
bind answer 200 with an ``Error`` naming an internal error, prioritize 500 with ``{"Error"}``; each
is counted as the ``error`` outcome and timed; the server keeps answering afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from services.scheduler.extender import Extender
from services.scheduler.fit import Policies
from services.scheduler.ledger import Ledger
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.placement import Placement
from services.scheduler.pod_cache import PodCache
from services.scheduler.wire import BindingArgs
from shared.model import NodeName, PodRequest, PodUID

POD = {
    "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "1"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}
BINDING = {"PodName": "p", "PodNamespace": "default", "PodUID": "u1", "Node": "n1"}
INTERNAL = "internal error in the gpubus scheduler: RuntimeError"


class Parts:
    """The extender's collaborators; each raises a bug when ``broken`` names it."""

    def __init__(self, *, broken: str, leader: bool = True) -> None:
        self.broken, self.is_leader, self.leader = broken, leader, "other"

    def _check(self, part: str) -> None:
        if self.broken == part:
            raise RuntimeError(f"{part} is broken")

    @property
    def ready(self) -> bool:
        self._check("state")
        return True

    def drop_provisional(self, uid: PodUID) -> None:
        self._check("binder")

    def provisional(self, request: PodRequest, node: NodeName) -> bool:
        return False

    def provisional_node(self, uid: PodUID) -> NodeName | None:
        self._check("binder")
        return None

    async def bind(self, args: BindingArgs) -> str:
        self._check("binder")
        return "bound"

    async def forward(self, args: BindingArgs) -> tuple[str, str]:
        self._check("forwarder")
        return "bound", ""


async def _serve(parts: Parts) -> AsyncIterator[tuple[aiohttp.ClientSession, str, SchedulerMetrics]]:
    ledger = Ledger()
    metrics = SchedulerMetrics(ledger)
    extender = Extender(
        placement=Placement(ledger, Policies()),
        binder=parts,
        pods=PodCache(),
        metrics=metrics,
        state=parts,
        leadership=parts,
        forwarder=parts,
    )
    server = TestServer(extender.app(), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            yield session, str(server.make_url("")), metrics
    finally:
        await server.close()


def _count(metrics: SchedulerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("verb", "body", "broken", "leader", "status"),
    [
        ("filter", {"Pod": POD, "NodeNames": ["n1"]}, "state", True, 200),
        ("prioritize", {"Pod": POD, "NodeNames": ["n1"]}, "binder", True, 500),
        ("bind", BINDING, "binder", True, 200),
        ("bind", BINDING, "forwarder", False, 200),
    ],
    ids=["filter", "prioritize", "bind-leader", "bind-standby"],
)
async def test_a_bug_behind_a_verb_is_an_error_answer_counted_as_error(
    verb: str, body: dict[str, Any], broken: str, leader: bool, status: int
) -> None:
    async for session, url, metrics in _serve(Parts(broken=broken, leader=leader)):
        async with session.post(f"{url}/{verb}", json=body) as response:
            assert response.status == status
            assert (await response.json())["Error"] == INTERNAL
        assert _count(metrics, "gpubus_scheduler_decisions_total", verb=verb, outcome="error") == 1.0
        assert _count(metrics, f"gpubus_scheduler_{verb}_seconds_count") == 1.0
        async with session.get(f"{url}/healthz") as response:
            assert response.status == 200
