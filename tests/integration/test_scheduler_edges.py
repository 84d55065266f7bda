"""Input the scheduler gets off the HTTP path, and nodes leaving: counted, skipped, never a crash.

Case matrix: a node deleted from the API server stops being judged (``node unregistered``); an
undecodable entry in the ``allocations`` and in the ``inventory`` bucket is counted and skipped
while the good ones keep working; a bound pod whose ``vgpu-devices-allocated`` annotation cannot
be decoded is counted and not adopted; a forwarded bind whose payload is unusable gets a clear
Error and is counted; an owned task that raises stops the whole scheduler instead of leaving it
limping without, say, its pod watch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
from asyncwait import wait_until
from conftest import bus_settings
from scheduler_harness import (
    ExtenderClient,
    create_node,
    gpu_pod,
    register_node,
    scheduler_settings,
    slice_of,
)

from services.scheduler.app import SchedulerApp
from services.scheduler.forward import BIND_SUBJECT
from services.sim.apiserver import SimApiServer
from shared import annotations as ann
from shared.bus import ALLOCATIONS, INVENTORY, Bus
from shared.kube import KubeClient
from shared.model import NodeName

pytest_plugins = ("scheduler_fixtures",)


async def metrics_has(client: ExtenderClient, line: str) -> bool:
    return line in (await client.get("/metrics"))[1]


async def test_a_node_deleted_from_the_api_server_is_no_longer_judged(
    bus: Bus, kube: KubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    for node in ("n1", "n2"):
        await create_node(kube, node)
        await register_node(bus, node)
    await wait_until(lambda: NodeName("n2") in scheduler.ledger, what="inventory")
    await kube.delete_node("n2")
    await wait_until(lambda: NodeName("n2") not in scheduler.ledger, what="n2 dropped")
    pod = dict(await kube.create_pod("default", gpu_pod("p", slice_of(1000))))  # type: ignore[arg-type]
    result = await client.filter(pod, ["n1", "n2"])
    assert result["NodeNames"] == ["n1"]
    assert result["FailedAndUnresolvableNodes"] == {"n2": "node unregistered"}


async def test_undecodable_kv_entries_are_counted_and_skipped(
    bus: Bus, kube: KubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await create_node(kube, "n1")
    await register_node(bus, "n1")
    await (await bus.kv(ALLOCATIONS)).put("pod-uid-garbage", b"\xc1 not msgpack")
    await (await bus.kv(INVENTORY)).put("n-garbage", b"\x93\x01\x02")
    for bucket in (ALLOCATIONS, INVENTORY):
        line = f'gpubus_scheduler_input_errors_total{{kind="undecodable",source="kv/{bucket}"}} 1.0'
        await wait_until(lambda line=line: metrics_has(client, line), what=f"{bucket} decode error counted")
    assert NodeName("n-garbage") not in scheduler.ledger and len(scheduler.ledger) == 0
    pod = dict(await kube.create_pod("default", gpu_pod("p", slice_of(1000))))  # type: ignore[arg-type]
    assert (await client.filter(pod, ["n1"]))["NodeNames"] == ["n1"]


async def test_a_bound_pod_with_an_undecodable_devices_annotation_is_counted_not_adopted(
    kube: KubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await create_node(kube, "n1")
    pod = gpu_pod("broken", slice_of(1000), annotations={ann.DEVICES_ALLOCATED: "GPU-1,NVIDIA,lots,10:;"})
    pod["spec"]["nodeName"] = "n1"
    await kube.create_pod("default", pod)  # type: ignore[arg-type]
    line = 'gpubus_scheduler_input_errors_total{kind="bad_devices_annotation",source="pods"}'
    await wait_until(lambda: metrics_has(client, line), what="bad annotation counted")
    assert len(scheduler.ledger) == 0


async def test_an_unusable_forwarded_bind_gets_a_clear_error_and_is_counted(
    bus: Bus, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    reply = orjson.loads(await bus.request(BIND_SUBJECT, b'{"PodName": 1}', timeout=5.0))
    assert reply == {
        "Error": "forwarded bind: binding args need string PodName, PodNamespace, PodUID and Node"
    }
    reply = orjson.loads(await bus.request(BIND_SUBJECT, b"\x00", timeout=5.0))
    assert reply["Error"].startswith("forwarded bind: request body is not valid JSON")
    assert await metrics_has(
        client, 'gpubus_scheduler_bad_requests_total{kind="bad_binding",verb="forwarded_bind"} 1.0'
    )
    assert await metrics_has(
        client, 'gpubus_scheduler_bad_requests_total{kind="not_json",verb="forwarded_bind"} 1.0'
    )


async def test_an_owned_task_that_raises_stops_the_scheduler(
    bus: Bus, nats_url: str, api: SimApiServer, tmp_path: Path
) -> None:
    app = SchedulerApp(
        scheduler_settings(api.write_kubeconfig(tmp_path / "kubeconfig")), bus_settings(nats_url)
    )
    running = asyncio.create_task(app.run(), name="scheduler-under-test")
    await wait_until(lambda: hasattr(app, "election") and app.election.is_leader, what="leadership")

    async def broken() -> None:
        raise RuntimeError("the pod watch broke")

    app._spawn(app._leader_tasks, "scheduler-broken", broken())
    await asyncio.wait_for(running, timeout=10.0)
    assert not app.state.ready and not app.election.is_leader
