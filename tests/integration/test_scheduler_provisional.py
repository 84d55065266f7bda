"""Filter's provisional slice: the next pod's filter sees it, the pod's own bind replaces it.

kube-scheduler filters the next pod while the previous one's bind is still on its way; without a
slice held at filter time both are told the same nearly full node fits and one bind fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import ExtenderClient, create_node, gpu_pod, register_node, scheduler_app, slice_of

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from shared.bus import Bus
from shared.model import AllocationState, DeviceUUID, NodeName, PodUID

pytest_plugins = ("scheduler_fixtures",)


async def cluster(bus: Bus, kube: SimKubeClient, app: SchedulerApp, *nodes: str) -> None:
    for node in nodes:
        await create_node(kube, node)
        await register_node(bus, node, gpus=1)
    await wait_until(lambda: all(NodeName(n) in app.ledger for n in nodes), what="inventory")


async def create(kube: SimKubeClient, pod: dict[str, Any]) -> dict[str, Any]:
    return dict(await kube.create_pod(pod["metadata"]["namespace"], pod))  # type: ignore[arg-type]


def uid(pod: dict[str, Any]) -> PodUID:
    return PodUID(pod["metadata"]["uid"])


def used_mem(app: SchedulerApp, node: str) -> int:
    return app.ledger.usage(NodeName(node), DeviceUUID(f"GPU-{node}-0")).usedmem


async def test_the_next_filter_sees_the_slice_held_for_a_pod_not_yet_bound(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1")
    first = await create(kube, gpu_pod("a", slice_of(60_000)))
    second = await create(kube, gpu_pod("b", slice_of(60_000)))
    assert (await client.filter(first, ["n1"]))["NodeNames"] == ["n1"]
    held = scheduler.ledger.entry(uid(first))
    assert held is not None and held.state is AllocationState.RESERVED and held.node == "n1"
    refused = await client.filter(second, ["n1"])
    assert refused["NodeNames"] == [] and "CardInsufficientMemory" in refused["FailedNodes"]["n1"]
    assert await client.bind(first, "n1") == ""  # its own slice does not stand in its way
    entry = scheduler.ledger.entry(uid(first))
    assert entry is not None and entry.state is AllocationState.DECIDED
    assert used_mem(scheduler, "n1") == 60_000  # one slice, not two


async def test_prioritize_puts_the_node_holding_the_slice_alone_on_top(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    nodes = ["n1", "n2", "n3"]
    await cluster(bus, kube, scheduler, *nodes)
    pod = await create(kube, gpu_pod("p", slice_of(10_000)))
    other = await create(kube, gpu_pod("q", slice_of(10_000)))
    assert await client.prioritize(other, nodes) == dict.fromkeys(nodes, 0)  # three equal empty nodes
    await client.filter(pod, nodes)
    held = scheduler.ledger.entry(uid(pod))
    assert held is not None
    scores = await client.prioritize(pod, nodes)
    assert scores[held.node] == 10
    assert all(score < 10 for node, score in scores.items() if node != held.node)
    assert await client.bind(pod, held.node) == ""
    assert await client.prioritize(pod, nodes) == await client.prioritize(other, nodes)  # bound: no favour


async def test_a_bind_to_another_node_drops_the_slice_filter_held(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", "n2")
    pod = await create(kube, gpu_pod("p", slice_of(30_000)))
    await client.filter(pod, ["n1", "n2"])
    held = scheduler.ledger.entry(uid(pod))
    assert held is not None
    other = "n2" if held.node == "n1" else "n1"
    assert await client.bind(pod, other) == ""
    assert used_mem(scheduler, held.node) == 0
    assert used_mem(scheduler, other) == 30_000


async def test_filtering_again_replaces_the_slice_instead_of_adding_one(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1")
    pod = await create(kube, gpu_pod("p", slice_of(50_000)))
    for _ in range(3):  # kube-scheduler retries a pod whose bind failed
        assert (await client.filter(pod, ["n1"]))["NodeNames"] == ["n1"]
    assert used_mem(scheduler, "n1") == 50_000


async def test_provisional_slices_can_be_turned_off(
    bus: Bus, nats_url: str, kube: SimKubeClient, api: SimApiServer, tmp_path: Path
) -> None:
    async with scheduler_app(bus_settings(nats_url), api.write_kubeconfig(tmp_path / "kubeconfig"),
                                provisional_ttl_s=0.0) as app:
        await wait_until(lambda: app.election.is_leader, what="leadership")
        await cluster(bus, kube, app, "n1")
        first = await create(kube, gpu_pod("a", slice_of(60_000)))
        second = await create(kube, gpu_pod("b", slice_of(60_000)))
        async with aiohttp.ClientSession() as session:
            client = ExtenderClient(session, app.port)
            assert (await client.filter(first, ["n1"]))["NodeNames"] == ["n1"]
            assert (await client.filter(second, ["n1"]))["NodeNames"] == ["n1"]
        assert app.ledger.entry(uid(first)) is None
