"""The scheduler extender end to end: real HTTP, real NATS, the SimApiServer through a kubeconfig.

Covers filter/prioritize/bind in both request forms, single-, multi- and init-container pods, the
HAMi annotations on the Binding, pods without GPU passing through, unknown and stale nodes,
pod.unschedulable events, deleted/finished pods releasing, applied/failed verdicts, adoption of
HAMi-annotated pods and a restart that rebuilds exactly the same usage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp
from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import (
    ExtenderClient,
    allocate_ran,
    create_node,
    gpu_pod,
    register_node,
    scheduler_app,
    slice_of,
)

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from shared import annotations as ann
from shared.bus import Bus, Subscription
from shared.events import AllocationApplied, AllocationDecided, AllocationFailed, Event, PodUnschedulable
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceUsage,
    DeviceUUID,
    NodeName,
    PodUID,
)

#: The api, kube, scheduler and client fixtures.
pytest_plugins = ("scheduler_fixtures",)


async def cluster(bus: Bus, kube: SimKubeClient, app: SchedulerApp, *nodes: str, gpus: int = 2) -> None:
    for node in nodes:
        await create_node(kube, node)
        await register_node(bus, node, gpus)
    await wait_until(lambda: all(NodeName(n) in app.ledger for n in nodes), what="inventory")


async def create(kube: SimKubeClient, pod: dict[str, Any]) -> dict[str, Any]:
    return dict(await kube.create_pod(pod["metadata"]["namespace"], pod))  # type: ignore[arg-type]


async def events(bus: Bus, subject: str) -> list[Event]:
    seen: list[Event] = []

    async def on(event: Event) -> None:
        seen.append(event)

    await bus.subscribe(subject, on, deliver="all")
    return seen


def used(app: SchedulerApp, node: str, i: int) -> DeviceUsage:
    return app.ledger.usage(NodeName(node), DeviceUUID(f"GPU-{node}-{i}"))


# --- filter -------------------------------------------------------------------------------


async def test_filter_returns_every_fitting_node_and_reasons_for_the_rest(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", "n2")
    pod = await create(kube, gpu_pod("p", slice_of(90_000)))
    result = await client.filter(pod, ["n1", "n2"])
    assert result["NodeNames"] == []
    assert result["FailedNodes"] == {"n1": "2/2 CardInsufficientMemory", "n2": "2/2 CardInsufficientMemory"}
    assert result["Error"] == ""
    ok = await client.filter(await create(kube, gpu_pod("q", slice_of(3000, 30))), ["n1", "n2"])
    assert ok["NodeNames"] == ["n1", "n2"] and ok["FailedNodes"] == {}


async def test_unknown_and_stale_nodes_get_a_clear_reason(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1")
    await register_node(bus, "old", ts=time.time() - 1000, heartbeat_s=10.0)
    await wait_until(lambda: NodeName("old") in scheduler.ledger, what="old inventory")
    pod = await create(kube, gpu_pod("p", slice_of(1000)))
    result = await client.filter(pod, ["n1", "ghost", "old"])
    assert result["NodeNames"] == ["n1"]
    unresolvable = result["FailedAndUnresolvableNodes"]
    assert unresolvable["ghost"] == "node unregistered"
    assert unresolvable["old"].startswith("node inventory stale: no heartbeat for")


async def test_nodes_form_returns_the_fitting_node_objects(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", "n2")
    pod = await create(kube, gpu_pod("p", slice_of(1000)))
    nodes = {
        "kind": "NodeList",
        "apiVersion": "v1",
        "items": [{"metadata": {"name": "n1", "labels": {"a": "b"}}}, {"metadata": {"name": "zz"}}],
    }
    status, body = await client.post("filter", {"Pod": pod, "Nodes": nodes})
    assert status == 200
    assert body["NodeNames"] is None
    assert body["Nodes"]["items"] == [{"metadata": {"name": "n1", "labels": {"a": "b"}}}]
    assert body["FailedAndUnresolvableNodes"] == {"zz": "node unregistered"}


async def test_pod_without_gpu_passes_through_unchanged(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    pod = await create(kube, gpu_pod("plain", {}))
    result = await client.filter(pod, ["anything", "else"])
    assert result["NodeNames"] == ["anything", "else"] and result["Error"] == ""


async def test_no_fit_publishes_pod_unschedulable_with_per_node_reasons(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    seen = await events(bus, "gpubus.pod.unschedulable.>")
    await cluster(bus, kube, scheduler, "n1")
    await create_node(kube, "ghost")  # a Node without a node-agent: known, but unregistered
    await wait_until(lambda: NodeName("ghost") in scheduler.nodes, what="ghost seen")
    pod = await create(kube, gpu_pod("big", slice_of(1000, count=3)))
    await client.filter(pod, ["n1", "ghost"])
    await wait_until(lambda: len(seen) == 1, what="pod.unschedulable")
    event = seen[0]
    assert isinstance(event, PodUnschedulable)
    assert event.name == "big"
    assert event.reasons == {"n1": "NodeInsufficientDevice", "ghost": "node unregistered"}


async def test_single_node_mode_returns_only_the_best_node(
    bus: Bus, nats_url: str, kube: SimKubeClient, api: SimApiServer, tmp_path: Path
) -> None:
    async with scheduler_app(
        bus_settings(nats_url), tmp_path / "kubeconfig", single_node_filter=True, replica_id="single"
    ) as app:
        await cluster(bus, kube, app, "n1", "n2")
        await wait_until(lambda: app.election.is_leader, what="leadership")
        async with aiohttp.ClientSession() as session:
            c = ExtenderClient(session, app.port)
            first = await create(kube, gpu_pod("p1", slice_of(1000)))
            assert await c.bind(first, "n2") == ""
            result = await c.filter(await create(kube, gpu_pod("p2", slice_of(1000))), ["n1", "n2"])
        assert result["NodeNames"] == ["n2"]  # binpack: the fuller node


# --- prioritize ---------------------------------------------------------------------------


async def test_prioritize_scores_by_node_policy_and_pod_annotation(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", "n2")
    busy = await create(kube, gpu_pod("busy", slice_of(40_000, 50, count=2)))
    assert await client.bind(busy, "n1") == ""
    pod = await create(kube, gpu_pod("p", slice_of(1000)))
    status, scores = await client.post("prioritize", {"Pod": pod, "NodeNames": ["n1", "n2", "ghost"]})
    assert status == 200
    binpack = {s["Host"]: s["Score"] for s in scores}
    assert binpack["n1"] > binpack["n2"] == 0 and binpack["ghost"] == 0
    spread_pod = await create(
        kube, gpu_pod("s", slice_of(1000), annotations={ann.NODE_SCHEDULER_POLICY: "spread"})
    )
    _, scores = await client.post("prioritize", {"Pod": spread_pod, "NodeNames": ["n1", "n2"]})
    spread = {s["Host"]: s["Score"] for s in scores}
    assert spread["n2"] == 10 and spread["n1"] < 10
    assert all(0 <= s <= 10 for s in [*binpack.values(), *spread.values()])


# --- bind ---------------------------------------------------------------------------------


async def test_bind_writes_hami_annotations_ledger_entry_and_decided_event(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    decided = await events(bus, "gpubus.allocation.decided.>")
    await cluster(bus, kube, scheduler, "n1")
    pod = await create(kube, gpu_pod("p", slice_of(3000, 30)))
    await client.filter(pod, ["n1"])
    assert await client.bind(pod, "n1") == ""
    bound = await kube.get_pod("default", "p")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    a = bound["metadata"]["annotations"]
    assert a[ann.ASSIGNED_NODE] == "n1"
    assert a[ann.BIND_PHASE] == "allocating"
    assert a[ann.DEVICES_ALLOCATED] == a[ann.DEVICES_TO_ALLOCATE] == "GPU-n1-1,NVIDIA,3000,30:;"
    assert a[ann.ASSIGNED_TIME] == a[ann.BIND_TIME] and a[ann.BIND_TIME].isdigit()
    entry = scheduler.ledger.entry(PodUID(pod["metadata"]["uid"]))
    assert entry is not None and entry.state is AllocationState.DECIDED
    await wait_until(lambda: len(decided) == 1, what="allocation.decided")
    assert isinstance(decided[0], AllocationDecided) and decided[0].allocation.node == "n1"
    # the hami.io/vgpu-node label comes with the bind-phase verdict patch, not as a second bind write
    assert ann.ASSIGNED_NODE not in (bound["metadata"].get("labels") or {})


async def test_multi_container_pod_with_init_container_gets_one_slot_per_container(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1")
    pod = await create(
        kube,
        gpu_pod("multi", slice_of(1000, 10), {}, slice_of(2000, 20, count=2), init=(slice_of(5000, 50),)),
    )
    assert await client.bind(pod, "n1") == ""
    bound = await kube.get_pod("default", "multi")
    assert bound is not None
    slots = bound["metadata"]["annotations"][ann.DEVICES_ALLOCATED].split(";")
    assert len(slots) == 5 and slots[-1] == ""  # init, c0, c1 (no GPU), c2, trailing
    assert slots[2] == ""
    assert slots[3].count(":") == 2


async def test_bind_refuses_a_node_the_pod_no_longer_fits(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", gpus=1)
    first = await create(kube, gpu_pod("a", slice_of(60_000)))
    second = await create(kube, gpu_pod("b", slice_of(60_000)))
    assert await client.bind(first, "n1") == ""
    error = await client.bind(second, "n1")
    assert "does not fit node n1" in error and "CardInsufficientMemory" in error
    assert scheduler.ledger.entry(PodUID(second["metadata"]["uid"])) is None
    b = await kube.get_pod("default", "b")
    assert b is not None and not b["spec"].get("nodeName")


async def test_a_second_bind_of_a_bound_pod_keeps_its_slice(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", "n2", gpus=1)
    a = await create(kube, gpu_pod("a", slice_of(50_000)))
    await client.filter(a, ["n1", "n2"])
    assert await client.bind(a, "n1") == ""
    await client.filter(a, ["n1", "n2"])  # filter's cached copy now predates the binding
    assert await client.bind(a, "n2") == "pod default/a is already bound to node n1"
    assert await client.bind(a, "n1") == ""  # the same node: a retry, done already
    meta = a["metadata"]
    no_uid = {"PodName": meta["name"], "PodNamespace": "default", "PodUID": "", "Node": "n1"}
    assert await client.post("bind", no_uid) == (200, {"Error": ""})  # resolved to the pod's own UID
    entry = scheduler.ledger.entry(PodUID(meta["uid"]))
    assert entry is not None and entry.node == "n1" and entry.state is AllocationState.DECIDED
    assert used(scheduler, "n1", 0).usedmem == 50_000
    b = await create(kube, gpu_pod("b", slice_of(50_000)))
    assert (await client.filter(b, ["n1"]))["NodeNames"] == []


async def test_a_stale_entry_of_a_pod_the_api_server_shows_unbound_gives_way_to_a_new_bind(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    # a bind that failed after deciding and could not be undone leaves such an entry behind
    await cluster(bus, kube, scheduler, "n1", "n2", gpus=1)
    a = await create(kube, gpu_pod("a", slice_of(50_000)))
    uid = PodUID(a["metadata"]["uid"])
    card = ContainerDevice(uuid=DeviceUUID("GPU-n1-0"), usedmem=50_000, usedcores=0)
    stale = Allocation(pod_uid=uid, namespace="default", name="a", node=NodeName("n1"), devices=((card,),),
                       containers=("c0",))
    await scheduler.state.write(stale)  # the leader's own entry, as the failed bind left it
    assert used(scheduler, "n1", 0).usedmem == 50_000
    assert await client.bind(a, "n2") == ""
    entry = scheduler.ledger.entry(uid)
    assert entry is not None and entry.node == "n2"
    assert used(scheduler, "n1", 0) == DeviceUsage() and used(scheduler, "n2", 0).usedmem == 50_000


async def test_a_bind_of_a_pod_with_bad_scoring_weights_is_refused_as_bad_pod(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", gpus=1)
    a = await create(kube, gpu_pod("w", slice_of(1000), annotations={ann.DEVICE_SCORING_WEIGHTS: "slot=1"}))
    error = await client.bind(a, "n1")  # no filter first: the bind parses the pod itself
    assert error.startswith("pod default/w: hami.io/device-scoring-weights='slot=1'"), error
    assert scheduler.ledger.entry(PodUID(a["metadata"]["uid"])) is None
    labels = {"verb": "bind", "outcome": "bad_pod"}
    assert scheduler.metrics.registry.get_sample_value("gpubus_scheduler_decisions_total", labels) == 1


async def test_concurrent_binds_of_one_pod_bind_it_once(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", "n2", gpus=1)
    # A pod bound on each node holds that node's handoff slot (no node-agent runs Allocate here to
    # free it), so whichever bind of pod a comes first waits, in flight, while the other one arrives.
    holders = {node: await create(kube, gpu_pod(f"holder-{node}", slice_of(1000))) for node in ("n1", "n2")}
    for node, holder in holders.items():
        assert await client.bind(holder, node) == ""
    a = await create(kube, gpu_pod("a", slice_of(50_000)))
    binds = {node: asyncio.create_task(client.bind(a, node)) for node in ("n1", "n2")}
    done, _ = await asyncio.wait(binds.values(), timeout=5, return_when=asyncio.FIRST_COMPLETED)
    [refused] = done
    assert refused.result() == "pod default/a is being bound already"
    for node, holder in holders.items():  # Allocate ran for the holders: their slots are free
        await allocate_ran(bus, holder, node)
    [winner] = [node for node, bind in binds.items() if bind is not refused]
    assert await asyncio.wait_for(binds[winner], 10) == ""
    pod = await kube.get_pod("default", "a")
    assert pod is not None and pod["spec"]["nodeName"] == winner
    entry = scheduler.ledger.entry(PodUID(a["metadata"]["uid"]))
    assert entry is not None and entry.node == winner  # the refused bind took nothing back
    assert used(scheduler, winner, 0).usedmem == 51_000


async def test_failed_binding_post_releases_entry(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1")
    pod = await create(kube, gpu_pod("gone", slice_of(1000)))
    await client.filter(pod, ["n1"])
    await kube.delete_pod("default", "gone")
    error = await client.bind(pod, "n1")  # never filter's copy: the pod watch's, or the API's
    # Refused either way: at once when the leader's pod watch has shown the delete, else by the
    # API server's 404 on the Binding POST, whose undo must leave nothing held either.
    assert error in ("pod default/gone does not exist",
                     'binding default/gone to n1 failed: bind pod: 404 pods "gone" not found'), error
    assert scheduler.ledger.entry(PodUID(pod["metadata"]["uid"])) is None
    assert used(scheduler, "n1", 0) == used(scheduler, "n1", 1) == DeviceUsage()


async def test_standby_replica_forwards_bind_to_the_leader(
    bus: Bus, nats_url: str, kube: SimKubeClient, scheduler: SchedulerApp, tmp_path: Path
) -> None:
    async with scheduler_app(bus_settings(nats_url), tmp_path / "kubeconfig",
                             replica_id="standby") as standby:
        await cluster(bus, kube, standby, "n1")
        await wait_until(lambda: NodeName("n1") in scheduler.ledger, what="leader inventory")
        pod = await create(kube, gpu_pod("p", slice_of(1000)))
        too_big = await create(kube, gpu_pod("big", slice_of(10**6)))
        async with aiohttp.ClientSession() as session:
            c = ExtenderClient(session, standby.port)
            assert (await c.filter(pod, ["n1"]))["NodeNames"] == ["n1"]
            assert not standby.election.is_leader
            assert await c.bind(pod, "n1") == ""
            refused = await c.bind(too_big, "n1")
        assert "does not fit node n1" in refused  # the leader's Error, relayed as is
        entry = scheduler.ledger.entry(PodUID(pod["metadata"]["uid"]))
        assert entry is not None and entry.node == "n1"
        bound = await kube.get_pod("default", "p")
        assert bound is not None and bound["spec"].get("nodeName") == "n1"
        await wait_until(
            lambda: standby.ledger.entry(PodUID(pod["metadata"]["uid"])) is not None, what="standby ledger"
        )


# --- release ------------------------------------------------------------------------------


async def test_deleted_and_finished_pods_release_their_slices(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient,
    agent: Subscription
) -> None:
    released = await events(bus, "gpubus.allocation.released.>")
    await cluster(bus, kube, scheduler, "n1", gpus=1)
    a = await create(kube, gpu_pod("a", slice_of(1000)))
    b = await create(kube, gpu_pod("b", slice_of(2000)))
    assert await client.bind(a, "n1") == "" and await client.bind(b, "n1") == ""
    assert used(scheduler, "n1", 0).usedmem == 3000
    await kube.delete_pod("default", "a")
    await wait_until(lambda: used(scheduler, "n1", 0).usedmem == 2000, what="a released")
    await kube.patch_pod_status("default", "b", {"status": {"phase": "Succeeded"}})
    await wait_until(lambda: used(scheduler, "n1", 0) == DeviceUsage(), what="b released")
    await wait_until(lambda: len(released) == 2, what="released events")


async def test_applied_and_failed_verdicts_move_the_entry(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", gpus=1)
    ok = await create(kube, gpu_pod("ok", slice_of(1000)))
    bad = await create(kube, gpu_pod("bad", slice_of(2000)))
    assert await client.bind(ok, "n1") == ""
    await bus.publish(
        AllocationApplied(
            pod_uid=ok["metadata"]["uid"],
            namespace="default",
            name="ok",
            container="c0",
            device_ids=("GPU-n1-0-0",),
            complete=True,
            node="n1",
        )
    )
    assert await client.bind(bad, "n1") == ""
    await bus.publish(
        AllocationFailed(
            pod_uid=bad["metadata"]["uid"],
            namespace="default",
            name="bad",
            reason="device count mismatch",
            node="n1",
        )
    )
    ok_uid, bad_uid = PodUID(ok["metadata"]["uid"]), PodUID(bad["metadata"]["uid"])
    await wait_until(
        lambda: getattr(scheduler.ledger.entry(ok_uid), "state", None) is AllocationState.APPLIED,
        what="applied",
    )
    await wait_until(
        lambda: getattr(scheduler.ledger.entry(bad_uid), "state", None) is AllocationState.FAILED,
        what="failed",
    )
    assert used(scheduler, "n1", 0).usedmem == 1000

    async def phase(name: str) -> str | None:
        pod = await kube.get_pod("default", name)
        return None if pod is None else (pod["metadata"].get("annotations") or {}).get(ann.BIND_PHASE)

    # HAMi's tools read the verdict from the pod: allocating -> success / failed
    await wait_until(lambda: _is(phase("ok"), "success"), what="bind-phase success")
    await wait_until(lambda: _is(phase("bad"), "failed"), what="bind-phase failed")
    await scheduler.phases.drained()
    for name in ("ok", "bad"):  # the same patch carries HAMi's node label
        pod = await kube.get_pod("default", name)
        assert pod is not None and pod["metadata"]["labels"][ann.ASSIGNED_NODE] == "n1"
    samples = {
        s.labels["outcome"]: s.value
        for m in scheduler.metrics.registry.collect()
        if m.name == "gpubus_scheduler_bind_phase_patches"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert samples == {"written": 2.0}


async def _is(value: Awaitable[str | None], expected: str) -> bool:
    return await value == expected


async def test_hami_pods_of_another_scheduler_are_adopted_without_renaming(
    bus: Bus, nats_url: str, kube: SimKubeClient, scheduler: SchedulerApp, tmp_path: Path
) -> None:
    await cluster(bus, kube, scheduler, "n1", gpus=2)
    await scheduler.aclose()
    hami = gpu_pod("hami-bound", slice_of(5000, 10), scheduler="hami-scheduler")
    hami["spec"]["nodeName"] = "n1"
    hami["metadata"]["annotations"] = {ann.DEVICES_ALLOCATED: "GPU-n1-1,NVIDIA,5000,10:;"}
    await create(kube, hami)
    await create(kube, gpu_pod("someone-elses", slice_of(1000), scheduler="default-scheduler"))
    forged = gpu_pod("forged", {}, scheduler="default-scheduler")  # asks for no GPU, books a whole card
    forged["spec"]["nodeName"] = "n1"
    forged["metadata"]["annotations"] = {ann.DEVICES_ALLOCATED: "GPU-n1-0,NVIDIA,80000,100:;"}
    await create(kube, forged)
    async with scheduler_app(bus_settings(nats_url), tmp_path / "kubeconfig",
                             replica_id="replica-d") as again:
        await wait_until(again.reconciler.pods_synced.is_set, what="reconcile")
        assert used(again, "n1", 1) == DeviceUsage(used=1, usedmem=5000, usedcores=10)
        assert used(again, "n1", 0) == DeviceUsage()
        assert [e.name for e in again.ledger.entries()] == ["hami-bound"]
        labels = {"source": "pods", "kind": "bad_devices_annotation"}
        assert again.metrics.registry.get_sample_value("gpubus_scheduler_input_errors_total", labels) == 1
        await kube.delete_pod("default", "hami-bound")
        await wait_until(lambda: len(again.ledger) == 0, what="adopted pod released on delete")


# --- state and recovery -------------------------------------------------------------------


async def test_restart_rebuilds_exactly_the_same_usage(  # noqa: PLR0917 (fixtures)
    bus: Bus, nats_url: str, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient,
    agent: Subscription,
    tmp_path: Path
) -> None:
    await cluster(bus, kube, scheduler, "n1", "n2", gpus=2)
    for i in range(6):
        pod = await create(kube, gpu_pod(f"p{i}", slice_of(1000 * (i + 1), 5 * i, count=1 + i % 2)))
        assert await client.bind(pod, "n1" if i % 2 else "n2") == ""
    before = {(n, i): used(scheduler, n, i) for n in ("n1", "n2") for i in range(2)}
    await scheduler.aclose()
    async with scheduler_app(bus_settings(nats_url), tmp_path / "kubeconfig",
                             replica_id="replica-b") as again:
        assert again.state.ready
        after = {(n, i): used(again, n, i) for n in ("n1", "n2") for i in range(2)}
        assert after == before
        assert len(again.ledger) == 6


async def test_reconcile_releases_entries_of_vanished_pods_and_adopts_hami_pods(  # noqa: PLR0917 (fixtures)
    bus: Bus, nats_url: str, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient,
    tmp_path: Path
) -> None:
    await cluster(bus, kube, scheduler, "n1", gpus=2)
    gone = await create(kube, gpu_pod("gone", slice_of(1000)))
    assert await client.bind(gone, "n1") == ""
    await scheduler.aclose()
    await kube.delete_pod("default", "gone")
    hami = gpu_pod("from-hami", slice_of(7000, 25))
    hami["spec"]["nodeName"] = "n1"
    hami["metadata"]["annotations"] = {
        ann.ASSIGNED_NODE: "n1",
        ann.BIND_PHASE: "success",
        ann.DEVICES_ALLOCATED: "GPU-n1-0,NVIDIA,7000,25:;",
    }
    await create(kube, hami)
    async with scheduler_app(bus_settings(nats_url), tmp_path / "kubeconfig",
                             replica_id="replica-c") as again:
        await wait_until(again.reconciler.pods_synced.is_set, what="reconcile")
        assert again.ledger.entry(PodUID(gone["metadata"]["uid"])) is None
        assert used(again, "n1", 0) == DeviceUsage(used=1, usedmem=7000, usedcores=25)
        adopted = [e for e in again.ledger.entries() if e.name == "from-hami"]
        assert len(adopted) == 1 and adopted[0].state is AllocationState.APPLIED


async def test_readyz_and_metrics(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await cluster(bus, kube, scheduler, "n1", gpus=1)
    pod = await create(kube, gpu_pod("p", slice_of(3000, 30)))
    assert await client.bind(pod, "n1") == ""
    assert await client.get("/readyz") == (200, "ready")
    assert (await client.get("/healthz"))[0] == 200
    status, text = await client.get("/metrics")
    assert status == 200
    assert 'hami_gpu_memory_allocated_bytes{device_cores="30",device_index="0",device_type=' in text
    assert (
        'hami_vgpu_memory_allocated_bytes{container_index="0",device_uuid="GPU-n1-0",namespace="default"'
        in text
    )
    assert 'gpubus_scheduler_decisions_total{outcome="bound",verb="bind"} 1.0' in text
    assert "gpubus_scheduler_bind_seconds_bucket" in text
