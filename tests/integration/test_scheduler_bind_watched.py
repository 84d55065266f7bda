"""/bind reads the pod from the leader's pod watch when the watch shows it, else from the API server.

Case matrix: a pod the watch has shown is bound without a read of the API server (counted by
source); once bound it is no longer held whole; a bind retried while the watch still shows the pod
unbound (it lags the binding) reads the API server before it would release the entry, and answers
"already bound" with the entry kept; a pod the watch has not shown (a UID the watch does not hold)
is read from the API server.
"""

from __future__ import annotations

from typing import Any

from asyncwait import wait_until
from scheduler_harness import ExtenderClient, gpu_pod, register_node, slice_of

from services.scheduler.app import SchedulerApp
from shared.bus import Bus
from shared.model import AllocationState, NodeName, PodUID

pytest_plugins = ("scheduler_fixtures",)


async def _reads(client: ExtenderClient, source: str) -> float:
    _, metrics = await client.get("/metrics")
    line = f'gpubus_scheduler_bind_pod_reads_total{{source="{source}"}} '
    return next((float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line)), 0.0)


async def _ready(bus: Bus, kube: Any, app: SchedulerApp) -> dict[str, Any]:
    await kube.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}})
    await register_node(bus, "n1", 1)
    await wait_until(lambda: NodeName("n1") in app.ledger and NodeName("n1") in app.nodes, what="node seen")
    pod = dict(await kube.create_pod("default", gpu_pod("p", slice_of(1000, 10))))
    await wait_until(lambda: app.awaiting.get(pod["metadata"]["uid"]) is not None, what="pod watched")
    return pod


async def test_a_watched_pod_is_bound_without_reading_the_api(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    pod = await _ready(bus, kube, scheduler)
    api, watch = await _reads(client, "api"), await _reads(client, "watch")
    assert await client.bind(pod, "n1") == ""
    assert (await _reads(client, "api"), await _reads(client, "watch")) == (api, watch + 1)
    bound = await kube.get_pod("default", "p")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    await wait_until(lambda: scheduler.awaiting.get(pod["metadata"]["uid"]) is None, what="bound pod let go")


async def test_a_retried_bind_the_watch_lags_reads_the_api_and_keeps_the_entry(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    pod = await _ready(bus, kube, scheduler)
    uid = pod["metadata"]["uid"]
    stale = scheduler.awaiting.get(uid)
    assert stale is not None and await client.bind(pod, "n1") == ""
    await wait_until(lambda: scheduler.awaiting.get(uid) is None, what="bound pod let go")
    scheduler.awaiting.put(uid, stale)  # as a watch that has not shown the binding yet would hold it
    api = await _reads(client, "api")
    assert await client.bind(pod, "n1") == ""
    assert await _reads(client, "api") == api + 1  # read again before anything is released
    entry = scheduler.ledger.entry(PodUID(uid))
    assert entry is not None and entry.state is not AllocationState.FAILED and entry.node == "n1"


async def test_a_pod_the_watch_does_not_hold_is_read_from_the_api(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    pod = await _ready(bus, kube, scheduler)
    scheduler.awaiting.drop(pod["metadata"]["uid"])  # as if the watch had not shown it yet
    api = await _reads(client, "api")
    assert await client.bind(pod, "n1") == ""
    assert await _reads(client, "api") == api + 1
