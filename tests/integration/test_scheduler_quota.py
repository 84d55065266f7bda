"""ResourceQuota at the scheduler end to end: real HTTP, real NATS, quotas in the SimApiServer.

Case matrix: a pod over its namespace's gpumem quota (per card x card count, which the API
server's own quota check cannot see) gets ``ResourceQuotaNotFit`` on every node, a refused bind
and a ``pod.unschedulable`` event; deleting another pod of the namespace frees quota; a bind with
no filter before it still enforces the quota (bind waits for the namespace's first read); the
``hami_resource_quota_used`` / ``hami_resource_quota_limit`` metrics show usage against the limit.
"""

from __future__ import annotations

from typing import Any

from asyncwait import wait_until
from scheduler_harness import ExtenderClient, create_node, gpu_pod, register_node, slice_of

from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from shared.bus import Bus
from shared.events import Event, PodUnschedulable
from shared.model import NodeName

pytest_plugins = ("scheduler_fixtures",)

NS = "team"
NODES = ["n1", "n2"]
USED = 'hami_resource_quota_used{limit="10000",namespace="team",quota_name="nvidia.com/gpumem"}'
LIMIT = 'hami_resource_quota_limit{namespace="team",quota_name="nvidia.com/gpumem"} 10000.0'


async def team_cluster(bus: Bus, kube: SimKubeClient, app: SchedulerApp, gpumem_limit: str) -> None:
    await kube.create_namespace(NS)
    await kube.create_resource_quota(
        NS,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu-quota"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": gpumem_limit}},
        },
    )
    for node in NODES:
        await create_node(kube, node)
        await register_node(bus, node, 2)
    await wait_until(lambda: all(NodeName(n) in app.ledger for n in NODES), what="inventory")


async def create(kube: SimKubeClient, name: str, mem: int, count: int) -> dict[str, Any]:
    pod = gpu_pod(name, slice_of(mem, count=count), namespace=NS)
    return dict(await kube.create_pod(NS, pod))  # type: ignore[arg-type]


async def test_pod_over_its_namespace_quota_is_refused_everywhere_until_another_pod_goes(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    seen: list[Event] = []

    async def on(event: Event) -> None:
        seen.append(event)

    await bus.subscribe("gpubus.pod.unschedulable.>", on, deliver="new")
    await team_cluster(bus, kube, scheduler, "10000")
    # 2 cards x 4000 MiB: the API server's quota counts 4000, HAMi's (and ours) 8000
    first = await create(kube, "first", 4000, count=2)
    assert await client.bind(first, "n1") == ""
    second = await create(kube, "second", 4000, count=2)
    refused = await client.filter(second, NODES)
    assert refused["NodeNames"] == []
    assert refused["FailedNodes"] == {"n1": "2/2 ResourceQuotaNotFit", "n2": "2/2 ResourceQuotaNotFit"}
    assert "ResourceQuotaNotFit" in await client.bind(second, "n2")
    await wait_until(
        lambda: any(isinstance(e, PodUnschedulable) and e.name == "second" for e in seen),
        what="pod.unschedulable for second",
    )
    _, metrics = await client.get("/metrics")
    assert f"{USED} 8000.0" in metrics and LIMIT in metrics
    assert 'gpubus_scheduler_filter_reasons_total{reason="ResourceQuotaNotFit"} 2.0' in metrics

    await kube.delete_pod(NS, "first")
    await wait_until(lambda: scheduler.ledger.namespace_usage(NS) == (0, 0), what="first released")
    assert (await client.filter(second, NODES))["NodeNames"] == NODES
    assert await client.bind(second, "n2") == ""
    _, metrics = await client.get("/metrics")
    assert f"{USED} 8000.0" in metrics


async def test_bind_enforces_the_quota_even_without_a_filter_call_first(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await team_cluster(bus, kube, scheduler, "3000")
    pod = await create(kube, "direct", 2000, count=2)
    error = await client.bind(pod, "n1")
    reason = "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"
    assert error == f"pod {NS}/direct does not fit node n1: {reason}"
    assert scheduler.ledger.namespace_usage(NS) == (0, 0)
