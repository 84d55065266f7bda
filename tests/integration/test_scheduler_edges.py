"""Input the scheduler gets off the HTTP path, and nodes leaving: counted, skipped, never a crash.

Case matrix: a node deleted from the API server stops being judged (``node unregistered``); an
undecodable entry in the ``allocations`` and in the ``inventory`` bucket is counted and skipped
while the good ones keep working; a bound pod whose ``vgpu-devices-allocated`` annotation cannot
be decoded is counted and not adopted; a ledger entry under another pod's key, an inventory
listing a device twice and a verdict from a node the pod is not on are counted and ignored, and
so is an event that is not one (on the bus's counters); an
inventory stamped in the future does not hide the node's later ones; a forwarded bind whose
payload is unusable gets a clear Error and is counted; an owned task that raises stops the whole
scheduler instead of leaving it limping without, say, its pod watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import (
    ExtenderClient,
    create_node,
    devices_for,
    gpu_pod,
    register_node,
    scheduler_app,
    scheduler_settings,
    slice_of,
)

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from services.scheduler.forward import BIND_SUBJECT
from shared import annotations as ann
from shared.bus import ALLOCATIONS, INVENTORY, Bus
from shared.errors import TaskDied
from shared.events import AllocationApplied, AllocationFailed, Inventory
from shared.ledger_entries import encode_allocation
from shared.lifetime import Lifetime, run_until_stopped
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceUsage,
    DeviceUUID,
    NodeName,
    PodUID,
)

pytest_plugins = ("scheduler_fixtures",)


async def metrics_has(client: ExtenderClient, line: str) -> bool:
    return line in (await client.get("/metrics"))[1]


async def test_a_node_deleted_from_the_api_server_is_no_longer_judged(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
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


@contextlib.asynccontextmanager
async def leading(nats_url: str, api: SimApiServer,
                  tmp_path: Path) -> AsyncIterator[tuple[SchedulerApp, ExtenderClient]]:
    """A scheduler started now (it loads both buckets as they are), once it leads."""
    async with scheduler_app(bus_settings(nats_url), api.write_kubeconfig(tmp_path / "kc-late")) as app, \
            aiohttp.ClientSession() as session:
        await wait_until(lambda: app.election.is_leader, what="leadership")
        yield app, ExtenderClient(session, app.port)


async def test_undecodable_kv_entries_are_counted_and_skipped(
    bus: Bus, kube: SimKubeClient, nats_url: str, api: SimApiServer, tmp_path: Path
) -> None:
    # written before the scheduler loads: the leader does not follow the bucket in its term
    # (a standby's watch meets them the same way: test_scheduler_term.py)
    await create_node(kube, "n1")
    await register_node(bus, "n1")
    await (await bus.kv(ALLOCATIONS)).put("pod-uid-garbage", b"\xc1 not msgpack")
    await (await bus.kv(INVENTORY)).put("n-garbage", b"\x93\x01\x02")
    async with leading(nats_url, api, tmp_path) as (scheduler, client):
        for bucket in (ALLOCATIONS, INVENTORY):
            line = f'gpubus_scheduler_input_errors_total{{kind="undecodable",source="kv/{bucket}"}} 1.0'
            await wait_until(lambda line=line: metrics_has(client, line),
                             what=f"{bucket} decode error counted")
        assert NodeName("n-garbage") not in scheduler.ledger and len(scheduler.ledger) == 0
        pod = dict(await kube.create_pod("default", gpu_pod("p", slice_of(1000))))  # type: ignore[arg-type]
        assert (await client.filter(pod, ["n1"]))["NodeNames"] == ["n1"]


def _entry(uid: str, node: str, mem: int) -> Allocation:
    card = ContainerDevice(uuid=DeviceUUID(f"GPU-{node}-0"), usedmem=mem, usedcores=0)
    return Allocation(
        pod_uid=PodUID(uid),
        namespace="default",
        name=uid,
        node=NodeName(node),
        devices=((card,),),
        containers=("c0",),
    )


def _used(scheduler: SchedulerApp, node: str) -> DeviceUsage:
    return scheduler.ledger.usage(NodeName(node), DeviceUUID(f"GPU-{node}-0"))


async def test_a_ledger_entry_under_another_pods_key_is_counted_and_ignored(
    bus: Bus, kube: SimKubeClient, nats_url: str, api: SimApiServer, tmp_path: Path
) -> None:
    await create_node(kube, "n1")
    await register_node(bus, "n1", gpus=1)
    running = gpu_pod("victim", slice_of(60_000))
    running["spec"]["nodeName"] = "n1"  # a live pod: the new leader's reconcile keeps its entry
    victim = (await kube.create_pod("default", running))["metadata"]["uid"]  # type: ignore[arg-type]
    kv = await bus.kv(ALLOCATIONS)
    await kv.put(victim, encode_allocation(_entry(victim, "n1", 60_000)))
    # a stray entry naming the victim must not replace its slice (60000 MiB -> 1 MiB)
    await kv.put("stray", encode_allocation(_entry(victim, "n1", 1)))
    async with leading(nats_url, api, tmp_path) as (scheduler, client):
        line = 'gpubus_scheduler_input_errors_total{kind="key_mismatch",source="kv/allocations"} 1.0'
        await wait_until(lambda: metrics_has(client, line), what="key mismatch counted")
        assert _used(scheduler, "n1").usedmem == 60_000 and len(scheduler.ledger) == 1
        pod = dict(await kube.create_pod("default", gpu_pod("big", slice_of(70_000))))  # type: ignore[arg-type]
        assert (await client.filter(pod, ["n1"]))["NodeNames"] == []


async def test_an_inventory_listing_a_device_twice_is_counted_and_ignored(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await create_node(kube, "n3")
    card = devices_for("n3", 1)[0]
    await bus.publish(Inventory(devices=(card, card), node="n3", source="node-agent/n3"))
    line = 'gpubus_scheduler_input_errors_total{kind="duplicate_device",source="events/inventory"} 1.0'
    await wait_until(lambda: metrics_has(client, line), what="duplicate device counted")
    assert NodeName("n3") not in scheduler.ledger
    # 2 x 50000 MiB would have gone onto the one 80000 MiB card twice
    two = gpu_pod("two", slice_of(50_000, count=2))
    pod = dict(await kube.create_pod("default", two))  # type: ignore[arg-type]
    assert (await client.filter(pod, ["n3"]))["NodeNames"] == []


async def test_an_inventory_stamped_in_the_future_does_not_hide_the_nodes_later_ones(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp
) -> None:
    await create_node(kube, "n2")
    await register_node(bus, "n2", gpus=1, ts=1e300)
    await wait_until(lambda: NodeName("n2") in scheduler.ledger, what="first inventory")
    # its next one (a second later; both copies of the first, KV's and the event's, may still be in flight)
    await register_node(bus, "n2", gpus=4, ts=time.time() + 1.0)

    def devices() -> int:
        held = scheduler.ledger.inventory(NodeName("n2"))
        return 0 if held is None else len(held.devices)

    await wait_until(lambda: devices() == 4, what="the later inventory taken")


async def test_a_verdict_from_a_node_the_pod_is_not_on_is_counted_and_ignored(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    for node in ("n1", "n2"):
        await create_node(kube, node)
        await register_node(bus, node, gpus=1)
    await wait_until(lambda: NodeName("n2") in scheduler.ledger, what="inventory")
    pod = dict(await kube.create_pod("default", gpu_pod("p", slice_of(70_000))))  # type: ignore[arg-type]
    assert await client.bind(pod, "n1") == ""
    uid = pod["metadata"]["uid"]
    await bus.publish(AllocationFailed(pod_uid=uid, namespace="default", name="p", reason="x", node="n2"))
    applied = AllocationApplied(
        pod_uid=uid, namespace="default", name="p", container="c0", device_ids=(), complete=True, node="n2"
    )
    await bus.publish(applied)
    for kind in ("allocation.failed", "allocation.applied"):
        line = f'gpubus_scheduler_input_errors_total{{kind="wrong_node",source="events/{kind}"}} 1.0'
        await wait_until(lambda line=line: metrics_has(client, line), what=f"{kind} from n2 counted")
    entry = scheduler.ledger.entry(PodUID(uid))
    assert entry is not None and entry.state is AllocationState.DECIDED
    assert _used(scheduler, "n1").usedmem == 70_000


async def test_an_undecodable_event_is_counted_on_metrics(
    bus: Bus, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    assert await metrics_has(client, "gpubus_bus_decode_errors_total 0.0")
    await bus.js.publish("gpubus.allocation.applied.n1", b"\xc1 not msgpack")
    await wait_until(lambda: metrics_has(client, "gpubus_bus_decode_errors_total 1.0"), what="counted")


async def test_a_bound_pod_with_an_undecodable_devices_annotation_is_counted_not_adopted(
    kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
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
    apps: list[SchedulerApp] = []

    async def serve(lifetime: Lifetime) -> None:
        settings = scheduler_settings(api.write_kubeconfig(tmp_path / "kubeconfig"))
        apps.append(SchedulerApp(settings, bus_settings(nats_url), on_fatal=lifetime.fail))
        async with apps[0]:
            await lifetime.wait()

    running = asyncio.create_task(run_until_stopped(serve, signals=False), name="scheduler-under-test")
    await wait_until(lambda: bool(apps) and hasattr(apps[0], "election") and apps[0].election.is_leader,
                     what="leadership")
    app = apps[0]

    async def broken() -> None:
        raise RuntimeError("the pod watch broke")

    app._leader_tasks.spawn("broken", broken(), root=True)
    with pytest.raises(TaskDied, match="task scheduler-leader:broken died: RuntimeError"):
        await asyncio.wait_for(running, timeout=10.0)
    assert not app.state.ready and not app.election.is_leader
