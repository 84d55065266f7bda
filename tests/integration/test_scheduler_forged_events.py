"""Events record what the API server says, not what a /filter body claims.

Case matrix: a filter for a pod the API server does not have (invented UID), and for a real pod
under another UID: no ``pod.unschedulable``, the refusal counted; a real pod filtered against
invented node names (one 10,000 characters long): the event names only the nodes the scheduler
knows; a real pod with a real no-fit: the event is published (the control case).
"""

from __future__ import annotations

from typing import Any

from asyncwait import wait_until
from scheduler_harness import ExtenderClient, create_node, gpu_pod, register_node, slice_of

from services.scheduler.app import SchedulerApp
from shared.bus import Bus
from shared.events import Event, PodUnschedulable
from shared.model import NodeName

pytest_plugins = ("scheduler_fixtures",)

LONG = "x" * 10_000


async def _seen(bus: Bus) -> list[PodUnschedulable]:
    seen: list[PodUnschedulable] = []

    async def on(event: Event) -> None:
        if isinstance(event, PodUnschedulable):
            seen.append(event)

    await bus.subscribe("gpubus.pod.unschedulable.>", on, deliver="new")
    return seen


async def _node(bus: Bus, kube: Any, app: SchedulerApp) -> None:
    await create_node(kube, "n1")
    await register_node(bus, "n1", 1)
    await wait_until(lambda: NodeName("n1") in app.ledger and NodeName("n1") in app.nodes, what="n1")


async def _unconfirmed(client: ExtenderClient) -> float:
    _, metrics = await client.get("/metrics")
    line = 'gpubus_scheduler_input_errors_total{kind="unconfirmed_pod",source="filter"} '
    return next((float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line)), 0.0)


async def test_a_filter_for_a_pod_that_does_not_exist_publishes_nothing(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    seen = await _seen(bus)
    await _node(bus, kube, scheduler)
    ghost = gpu_pod("ghost", slice_of(10_000_000))
    ghost["metadata"]["uid"] = "forged-uid"
    real = dict(await kube.create_pod("default", gpu_pod("real", slice_of(10_000_000))))
    renamed = {**real, "metadata": {**real["metadata"], "uid": "another-uid"}}
    for pod in (ghost, renamed):
        assert (await client.filter(pod, ["n1"]))["NodeNames"] == []
    assert await _unconfirmed(client) == 2
    assert (await client.filter(real, ["n1"]))["NodeNames"] == []  # after them, in order
    await wait_until(lambda: len(seen) >= 1, what="the real pod's event")
    assert [(e.name, e.uid) for e in seen] == [("real", real["metadata"]["uid"])]


async def test_invented_node_names_never_reach_an_event(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    seen = await _seen(bus)
    await _node(bus, kube, scheduler)
    pod = dict(await kube.create_pod("default", gpu_pod("p", slice_of(10_000_000))))
    result = await client.filter(pod, ["n1", LONG, "invented"])
    assert result["NodeNames"] == []
    await wait_until(lambda: len(seen) == 1, what="pod.unschedulable")
    assert set(seen[0].reasons) == {"n1"}
    assert "CardInsufficientMemory" in seen[0].reasons["n1"]
