"""The kube-scheduler stand-in against the SimApiServer and a small in-test extender over real HTTP.

The extender here is a faithful peer of the real one: it keeps free GPU slots per node, answers
``/filter`` with ``NodeNames`` (or ``Nodes`` when not nodeCacheCapable) and ``FailedNodes``,
scores free slots in ``/prioritize``, and on ``/bind`` POSTs the Binding itself.

Case matrix: PascalCase requests in both node forms; highest score wins; only our schedulerName;
unschedulable -> PodScheduled=False with the aggregated message, retried when a pod is deleted
(never by its backoff alone) or after the leftover time with no event; filter Error ->
SchedulerError; bind Error -> retried; many pods bound concurrently without exceeding capacity; 80
binds parked at the extender while every pod is still filtered; no bindVerb -> pods/binding; pods
outside managedResources skip the extender; in-tree filters (unschedulable, nodeSelector, taint);
a plain profile (``default-scheduler``: in-tree filters and pods/binding, no extender, its own
event source); nvidia.com/gpu fit (allocatable 0 skipped, bound pods count until they finish, a node regaining
allocatable retries at once, ``fit_resources=()`` leaves it to the extender as HAMi's config does);
events as kube-scheduler records them (FailedScheduling with the condition's message, repeats
counted on one event; Scheduled naming the node; from the scheduler's name); on 250 nodes each
/filter carries kube-scheduler's 120 feasible nodes, the next cycle starting where the last stopped
(all 250 with ``percentage_of_nodes_to_score=100``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from asyncwait import wait_until
from manual_clock import ManualClock

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.extender_client import ExtenderConfig
from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.scheduler import Outcome, SchedulerSettings, SimScheduler, feasible_nodes_to_find
from gpubus_local.sim.scheduling_queue import BackoffPolicy
from shared.kube_types import Event, Node, Pod

GPU = "nvidia.com/gpu"


@dataclass
class Extender:
    """An extender with ``free`` one-GPU slots per node."""

    kube: SimKubeClient
    free: dict[str, int]
    url: str = ""
    requests: dict[str, list[Any]] = field(
        default_factory=lambda: {"filter": [], "prioritize": [], "bind": []})
    filter_error: str = ""
    bind_errors: int = 0
    bind_gate: asyncio.Event | None = None
    """When set, /bind waits for it (a bind waiting for its Allocate leases, as the real one can)."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/scheduler/filter", self.filter)
        app.router.add_post("/scheduler/prioritize", self.prioritize)
        app.router.add_post("/scheduler/bind", self.bind)
        return app

    @staticmethod
    def names(args: dict[str, Any]) -> list[str]:
        if args["NodeNames"] is not None:
            return list(args["NodeNames"])
        return [n["metadata"]["name"] for n in args["Nodes"]["items"]]

    async def filter(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.requests["filter"].append(args)
        if self.filter_error:
            return web.json_response({"Error": self.filter_error})
        fits = [n for n in self.names(args) if self.free.get(n, 0) > 0]
        failed = {n: "insufficient GPU" for n in self.names(args) if n not in fits}
        if args["NodeNames"] is not None:
            return web.json_response({"NodeNames": fits, "Nodes": None, "FailedNodes": failed, "Error": ""})
        items = [n for n in args["Nodes"]["items"] if n["metadata"]["name"] in fits]
        return web.json_response({"Nodes": {"items": items}, "FailedNodes": failed, "Error": ""})

    async def prioritize(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.requests["prioritize"].append(args)
        scores = [{"Host": n, "Score": min(self.free.get(n, 0), 10)} for n in self.names(args)]
        return web.json_response(scores)

    async def bind(self, request: web.Request) -> web.Response:
        args = await request.json()
        self.requests["bind"].append(args)
        if self.bind_gate is not None:
            await self.bind_gate.wait()
        if self.bind_errors:
            self.bind_errors -= 1
            return web.json_response({"Error": "node lock held"})
        if self.free.get(args["Node"], 0) <= 0:
            return web.json_response({"Error": f"no room on {args['Node']}"})
        self.free[args["Node"]] -= 1
        await self.kube.bind_pod(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"],
                                 {"gpubus.io/bound-by": "extender"})
        return web.json_response({"Error": ""})


@dataclass
class Cluster:
    api: SimApiServer
    kube: SimKubeClient
    extender: Extender
    outcomes: list[Outcome] = field(default_factory=list)
    scheduler: SimScheduler | None = None

    async def add_nodes(self, *nodes: Node) -> None:
        for node in nodes:
            await self.kube.create_node(node)
            await self.kube.patch_node_status(node["metadata"]["name"], {"status": node.get("status") or {}})

    async def start(self, config: ExtenderConfig | None = None, *, clock: ManualClock | None = None,
                    **settings: Any) -> SimScheduler:
        config = config or ExtenderConfig(url_prefix=self.extender.url + "/scheduler/")
        # A short backoff: an unschedulable pod then waits only for an event (the 5-minute leftover
        # flush is far away), which is what the tests of retries look at.
        settings.setdefault("backoff", BackoffPolicy(initial_s=0.01, max_s=0.01))
        self.scheduler = SimScheduler(self.kube, [config], SchedulerSettings(**settings),
                                      on_outcome=self.outcomes.append, clock=clock)
        self.scheduler.start()
        await asyncio.wait_for(self.scheduler.synced.wait(), 10)
        return self.scheduler

    async def node_of(self, name: str) -> str | None:
        pod = await self.kube.get_pod("default", name)
        return None if pod is None else pod["spec"].get("nodeName")

    async def wait_bound(self, *names: str) -> dict[str, str]:
        nodes: dict[str, str] = {}

        async def all_bound() -> bool:
            for name in names:
                node = await self.node_of(name)
                if node is None:
                    return False
                nodes[name] = node
            return True

        await wait_until(all_bound, what=f"{names} bound")
        return nodes


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with SimApiServer() as api:
        kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kc"))
        extender = Extender(kube=kube, free={})
        runner = web.AppRunner(extender.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        extender.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        state = Cluster(api=api, kube=kube, extender=extender)
        try:
            yield state
        finally:
            if state.scheduler is not None:
                await state.scheduler.stop()
            await runner.cleanup()
            await kube.close()


def node(name: str, *, gpus: int = 8, labels: dict[str, str] | None = None, **spec: Any) -> Node:
    """A node whose device plugin advertises ``gpus`` (allocatable ``nvidia.com/gpu``)."""
    return {"metadata": {"name": name, "labels": labels or {"kubernetes.io/hostname": name}},
            "spec": spec, "status": {"capacity": {GPU: str(gpus)}, "allocatable": {GPU: str(gpus)}}}  # type: ignore[typeddict-item]


def gpu_pod(name: str, *, scheduler: str = "gpubus-scheduler", gpus: int = 1, **spec: Any) -> Pod:
    limits = {GPU: str(gpus)} if gpus else {}
    return {"metadata": {"name": name}, "spec": {
        "schedulerName": scheduler, **spec,  # type: ignore[typeddict-item]
        "containers": [{"name": "c", "image": "cuda", "resources": {"limits": limits}}]}}


async def test_pod_goes_filter_prioritize_bind_with_pascal_case_json(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 1, "n2": 5, "n3": 0}
    await cluster.add_nodes(node("n1"), node("n2"), node("n3"))
    await cluster.start()
    created = await cluster.kube.create_pod("default", gpu_pod("a"))
    assert (await cluster.wait_bound("a")) == {"a": "n2"}
    [filter_args] = cluster.extender.requests["filter"]
    assert set(filter_args) == {"Pod", "Nodes", "NodeNames"} and filter_args["Nodes"] is None
    assert sorted(filter_args["NodeNames"]) == ["n1", "n2", "n3"]
    assert filter_args["Pod"]["metadata"]["uid"] == created["metadata"]["uid"]
    [prioritize_args] = cluster.extender.requests["prioritize"]
    assert sorted(prioritize_args["NodeNames"]) == ["n1", "n2"]
    assert cluster.extender.requests["bind"] == [{"PodName": "a", "PodNamespace": "default",
                                                  "PodUID": created["metadata"]["uid"], "Node": "n2"}]
    bound = await cluster.kube.get_pod("default", "a")
    assert bound is not None and bound["metadata"]["annotations"] == {"gpubus.io/bound-by": "extender"}
    assert [o.reason for o in cluster.outcomes] == ["Scheduled"]


async def test_full_nodes_form_when_not_node_cache_capable(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 0, "n2": 1}
    await cluster.add_nodes(node("n1"), node("n2"))
    await cluster.start(ExtenderConfig(url_prefix=cluster.extender.url + "/scheduler",
                                       node_cache_capable=False))
    await cluster.kube.create_pod("default", gpu_pod("a"))
    assert (await cluster.wait_bound("a")) == {"a": "n2"}
    filter_args = cluster.extender.requests["filter"][0]
    assert filter_args["NodeNames"] is None and filter_args["Nodes"]["kind"] == "NodeList"


async def test_pods_of_other_schedulers_are_left_alone(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 5}
    await cluster.add_nodes(node("n1"))
    await cluster.kube.create_pod("default", gpu_pod("theirs", scheduler="default-scheduler"))
    await cluster.start()
    await cluster.kube.create_pod("default", gpu_pod("ours"))
    await cluster.wait_bound("ours")
    assert [args["Pod"]["metadata"]["name"] for args in cluster.extender.requests["filter"]] == ["ours"]
    assert await cluster.node_of("theirs") is None


async def test_a_plain_profile_schedules_its_pods_without_the_extender(cluster: Cluster) -> None:
    """As a kube-scheduler with a second profile: ``default-scheduler`` pods (no GPUs: the webhook
    leaves them alone) are placed by the in-tree filters and bound through pods/binding, and their
    events come from that profile's name; other schedulers' pods are still left alone."""
    cluster.extender.free = {"n1": 0, "n2": 0}
    await cluster.add_nodes(node("n1", labels={"disk": "ssd"}), node("n2"))
    await cluster.start(plain_profiles=("default-scheduler",))
    await cluster.kube.create_pod("default", gpu_pod("nginx", scheduler="default-scheduler", gpus=0,
                                                     nodeSelector={"disk": "ssd"}))
    await cluster.kube.create_pod("default", gpu_pod("other", scheduler="volcano", gpus=0))
    assert (await cluster.wait_bound("nginx")) == {"nginx": "n1"}
    assert cluster.extender.requests == {"filter": [], "prioritize": [], "bind": []}
    assert await cluster.node_of("other") is None

    event = await the_one_event_about(cluster.kube, "nginx")
    assert (event["reason"], event["source"]) == ("Scheduled", {"component": "default-scheduler"})


async def test_unschedulable_pod_gets_a_condition_and_retries_when_a_pod_is_deleted(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 1, "n2": 0}
    await cluster.add_nodes(node("n1"), node("n2"))
    clock = ManualClock()  # no time passes but what the test moves on: only the event can retry
    scheduler = await cluster.start(clock=clock)
    await cluster.kube.create_pod("default", gpu_pod("first"))
    await cluster.wait_bound("first")
    second_uid = (await cluster.kube.create_pod("default", gpu_pod("second")))["metadata"]["uid"]

    async def condition() -> dict[str, Any]:
        pod = await cluster.kube.get_pod("default", "second")
        conditions = (pod or {}).get("status", {}).get("conditions", [])
        found = [c for c in conditions if c["type"] == "PodScheduled"]
        return dict(found[0]) if found else {}

    async def marked_unschedulable() -> bool:
        return (await condition()).get("status") == "False"

    await wait_until(marked_unschedulable, what="PodScheduled=False")
    assert (await condition())["reason"] == "Unschedulable"
    assert (await condition())["message"] == "0/2 nodes are available: 2 insufficient GPU."
    await wait_until(lambda: scheduler.queue.where(second_uid) == "unschedulable", what="second waits")
    clock.advance(60.0)  # six thousand backoffs, and the 5-minute leftover flush still far off
    assert scheduler.stats.unschedulable == 1 and scheduler.queue.where(second_uid) == "unschedulable"
    cluster.extender.free["n1"] += 1  # what the real extender does when it sees the deletion
    await cluster.kube.delete_pod("default", "first")
    assert (await cluster.wait_bound("second")) == {"second": "n1"}


async def events_about(kube: SimKubeClient, name: str) -> list[Event]:
    events, _ = await kube.list_events("default", field_selector=f"involvedObject.name={name}")
    return events


async def the_one_event_about(kube: SimKubeClient, name: str) -> Event:
    """Wait for the first event about pod ``name`` and return it (the only one there must be)."""
    async def recorded() -> bool:
        return bool(await events_about(kube, name))

    await wait_until(recorded, what=f"an event about {name}")
    [event] = await events_about(kube, name)
    return event


async def test_an_unschedulable_pod_gets_a_failed_scheduling_event_with_the_extenders_reasons(
        cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 0, "n2": 0}
    await cluster.add_nodes(node("n1"), node("n2"))
    await cluster.start()
    created = await cluster.kube.create_pod("default", gpu_pod("big"))

    async def recorded(count: int) -> bool:
        return [e.get("count") for e in await events_about(cluster.kube, "big")] == [count]

    await wait_until(lambda: recorded(1), what="a FailedScheduling event")
    [event] = await events_about(cluster.kube, "big")
    assert (event["type"], event["reason"]) == ("Warning", "FailedScheduling")
    assert event["message"] == "0/2 nodes are available: 2 insufficient GPU."
    assert event["source"] == {"component": "gpubus-scheduler"}
    assert event["reportingComponent"] == "gpubus-scheduler"
    assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
    pod = await cluster.kube.get_pod("default", "big")
    conditions = (pod or {}).get("status", {}).get("conditions", [])
    assert [c["message"] for c in conditions if c["type"] == "PodScheduled"] == [event["message"]]
    # a node update is a cluster event: the pod is tried again, with the same verdict
    await cluster.kube.patch_node_status("n2", {"status": {"conditions": []}})
    await wait_until(lambda: recorded(2), what="the repeat counted on the same event")


async def test_a_bound_pod_gets_a_scheduled_event_from_the_schedulers_name(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 1}
    await cluster.add_nodes(node("n1"))
    await cluster.start(scheduler_name="hami-scheduler")
    await cluster.kube.create_pod("default", gpu_pod("a", scheduler="hami-scheduler"))
    await cluster.wait_bound("a")

    event = await the_one_event_about(cluster.kube, "a")
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal", "Scheduled", "Successfully assigned default/a to n1")
    assert event["source"] == {"component": "hami-scheduler"}


async def test_unschedulable_pod_without_events_is_retried_after_the_leftover_time(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 0}
    await cluster.add_nodes(node("n1"))
    scheduler = await cluster.start(backoff=BackoffPolicy(initial_s=0.01, max_s=0.01,
                                                          max_in_unschedulable_s=0.05, leftover_check_s=0.02))
    await cluster.kube.create_pod("default", gpu_pod("a"))
    await wait_until(lambda: scheduler.stats.unschedulable >= 2, what="two failed attempts")
    cluster.extender.free["n1"] = 1
    await cluster.wait_bound("a")


async def test_extender_filter_error_is_a_scheduler_error(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 1}
    cluster.extender.filter_error = "inventory not loaded"
    await cluster.add_nodes(node("n1"))
    await cluster.start()
    await cluster.kube.create_pod("default", gpu_pod("a"))
    await wait_until(lambda: any(o.reason == "SchedulerError" for o in cluster.outcomes),
                     what="error outcome")
    assert "inventory not loaded" in cluster.outcomes[0].message


async def test_bind_error_is_retried_after_backoff(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 1}
    cluster.extender.bind_errors = 1
    await cluster.add_nodes(node("n1"))
    scheduler = await cluster.start(backoff=BackoffPolicy(initial_s=0.05, max_s=0.05))
    await cluster.kube.create_pod("default", gpu_pod("a"))
    await cluster.wait_bound("a")
    assert scheduler.stats.bind_failures == 1 and len(cluster.extender.requests["bind"]) == 2
    assert [o.reason for o in cluster.outcomes] == ["BindingRejected", "Scheduled"]


async def test_many_pods_bind_concurrently_within_capacity(cluster: Cluster) -> None:
    cluster.extender.free = {f"n{i}": 8 for i in range(5)}
    await cluster.add_nodes(*(node(f"n{i}") for i in range(5)))
    await cluster.start(backoff=BackoffPolicy(initial_s=0.05, max_s=0.1))
    names = [f"p{i}" for i in range(40)]
    await asyncio.gather(*(cluster.kube.create_pod("default", gpu_pod(n)) for n in names))
    placed = await cluster.wait_bound(*names)
    per_node = {n: list(placed.values()).count(n) for n in cluster.extender.free}
    assert all(count == 8 for count in per_node.values()), per_node


async def test_binds_waiting_at_the_extender_never_hold_up_the_next_cycles(cluster: Cluster) -> None:
    cluster.extender.free = {f"n{i}": 16 for i in range(5)}
    cluster.extender.bind_gate = asyncio.Event()
    await cluster.add_nodes(*(node(f"n{i}", gpus=16) for i in range(5)))
    await cluster.start()
    names = [f"p{i}" for i in range(80)]  # more than any connection pool or bind limit it once had
    await asyncio.gather(*(cluster.kube.create_pod("default", gpu_pod(n)) for n in names))
    await wait_until(lambda: len(cluster.extender.requests["bind"]) == len(names), what="all binds in flight")
    assert len(cluster.extender.requests["filter"]) == len(names)
    cluster.extender.bind_gate.set()
    assert len(await cluster.wait_bound(*names)) == len(names)


async def test_without_bind_verb_the_scheduler_posts_the_binding(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 1}
    await cluster.add_nodes(node("n1"))
    await cluster.start(ExtenderConfig(url_prefix=cluster.extender.url + "/scheduler", bind_verb=""))
    await cluster.kube.create_pod("default", gpu_pod("a"))
    assert (await cluster.wait_bound("a")) == {"a": "n1"}
    assert cluster.extender.requests["bind"] == []


async def test_pods_without_managed_resources_skip_the_extender(cluster: Cluster) -> None:
    await cluster.add_nodes(node("n1"))
    await cluster.start(ExtenderConfig(url_prefix=cluster.extender.url + "/scheduler",
                                       managed_resources=(GPU,)))
    await cluster.kube.create_pod("default", gpu_pod("cpu-only", gpus=0))
    assert (await cluster.wait_bound("cpu-only")) == {"cpu-only": "n1"}
    assert cluster.extender.requests == {"filter": [], "prioritize": [], "bind": []}


async def test_in_tree_filters_run_before_the_extender(cluster: Cluster) -> None:
    cluster.extender.free = {"cordoned": 5, "other-zone": 5, "tainted": 5, "ok": 1}
    await cluster.add_nodes(node("cordoned", unschedulable=True),
                            node("other-zone", labels={"zone": "b"}),
                            node("tainted", labels={"zone": "a"},
                                 taints=[{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]),
                            node("ok", labels={"zone": "a"}))
    await cluster.start()
    await cluster.kube.create_pod("default", gpu_pod("a", nodeSelector={"zone": "a"}))
    assert (await cluster.wait_bound("a")) == {"a": "ok"}
    assert cluster.extender.requests["filter"][0]["NodeNames"] == ["ok"]
    await cluster.kube.create_pod("default", gpu_pod("b", nodeSelector={"zone": "a"}))
    await wait_until(lambda: any(o.reason == "Unschedulable" for o in cluster.outcomes), what="unschedulable")
    message = next(o.message for o in cluster.outcomes if o.reason == "Unschedulable")
    assert message == ("0/4 nodes are available: 1 insufficient GPU, 1 node(s) didn't match Pod's node "
                       "affinity/selector, 1 node(s) had untolerated taint, 1 node(s) were unschedulable.")


async def test_node_whose_device_plugin_is_gone_is_skipped(cluster: Cluster) -> None:
    cluster.extender.free = {"restarting": 5, "n2": 1}
    await cluster.add_nodes(node("restarting", gpus=0), node("n2"))
    await cluster.start()
    await cluster.kube.create_pod("default", gpu_pod("a"))
    assert (await cluster.wait_bound("a")) == {"a": "n2"}
    assert cluster.extender.requests["filter"][0]["NodeNames"] == ["n2"]


async def test_gpus_of_bound_pods_count_against_allocatable_until_they_finish(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 5}
    await cluster.add_nodes(node("n1", gpus=2))
    await cluster.start()
    await cluster.kube.create_pod("default", gpu_pod("first", gpus=2))
    await cluster.wait_bound("first")
    await cluster.kube.create_pod("default", gpu_pod("second"))
    await wait_until(lambda: any(o.reason == "Unschedulable" for o in cluster.outcomes), what="unschedulable")
    message = next(o.message for o in cluster.outcomes if o.reason == "Unschedulable")
    assert message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    await cluster.kube.patch_pod_status("default", "first", {"status": {"phase": "Succeeded"}})
    assert (await cluster.wait_bound("second")) == {"second": "n1"}


async def test_node_regaining_allocatable_retries_pending_pods_at_once(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 5}
    await cluster.add_nodes(node("n1", gpus=0))
    await cluster.start()
    await cluster.kube.create_pod("default", gpu_pod("a"))
    await wait_until(lambda: any(o.reason == "Unschedulable" for o in cluster.outcomes), what="unschedulable")
    await cluster.kube.patch_node_status("n1", {"status": {"allocatable": {GPU: "8"}}})
    assert (await cluster.wait_bound("a")) == {"a": "n1"}


async def test_no_fit_resources_binds_where_the_extender_says_as_hami_configures_it(cluster: Cluster) -> None:
    cluster.extender.free = {"n1": 5}
    await cluster.add_nodes(node("n1", gpus=0))
    await cluster.start(fit_resources=())
    await cluster.kube.create_pod("default", gpu_pod("a"))
    assert (await cluster.wait_bound("a")) == {"a": "n1"}


async def test_filters_stop_at_kube_schedulers_feasible_node_count_and_rotate(cluster: Cluster) -> None:
    names = [f"n{i:03}" for i in range(250)]
    cluster.extender.free = dict.fromkeys(names, 8)
    await cluster.add_nodes(*(node(n) for n in names))
    await cluster.start()
    await cluster.kube.create_pod("default", gpu_pod("a"))
    await cluster.wait_bound("a")
    await cluster.kube.create_pod("default", gpu_pod("b"))
    await cluster.wait_bound("b")
    first, second = (set(args["NodeNames"]) for args in cluster.extender.requests["filter"])
    assert len(first) == len(second) == feasible_nodes_to_find(250) == 120
    assert not first & second  # the second cycle went on where the first stopped


async def test_percentage_100_sends_every_node_to_the_extender(cluster: Cluster) -> None:
    names = [f"n{i:03}" for i in range(250)]
    cluster.extender.free = dict.fromkeys(names, 8)
    await cluster.add_nodes(*(node(n) for n in names))
    await cluster.start(percentage_of_nodes_to_score=100)
    await cluster.kube.create_pod("default", gpu_pod("a"))
    await cluster.wait_bound("a")
    [args] = cluster.extender.requests["filter"]
    assert sorted(args["NodeNames"]) == names


@pytest.mark.parametrize(("nodes", "percentage", "expected"), [
    (0, 0, 0), (99, 0, 99), (100, 0, 100), (250, 0, 120), (1000, 0, 420), (5000, 0, 500),
    (6000, 0, 300), (100_000, 0, 5000), (1000, 10, 100), (1000, 100, 1000), (5000, 50, 2500),
])
def test_feasible_nodes_to_find_is_kube_schedulers(nodes: int, percentage: int, expected: int) -> None:
    assert feasible_nodes_to_find(nodes, percentage) == expected
