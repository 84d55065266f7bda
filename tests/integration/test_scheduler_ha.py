"""Concurrency and high availability: no over-commit under concurrent binds, the Allocate leases,
and leader failover.

Matrix: many concurrent binds of random sizes onto one node (several seeds) with a node-agent
stand-in that releases leases on ``allocation.decided``; a lease held by a pod that is gone is
taken over at once; a lease held by a live pod is waited for until its TTL runs out, or the bind
gives up with an Error naming the holder; pods of different sizes never wait for each other;
the leader dies without releasing and a standby takes over and binds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import (
    GPU_MEM,
    ExtenderClient,
    create_node,
    gpu_pod,
    register_node,
    scheduler_app,
    slice_of,
)

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from services.scheduler.forward import BIND_SUBJECT, BindForwarder
from services.scheduler.wire import BindingArgs
from shared.bus import Bus, NoResponders, QueryHandler, Subscription
from shared.events import AllocationDecided, Event
from shared.handoff import device_counts, lease_key
from shared.model import AllocationState, DeviceUUID, NodeName

pytest_plugins = ("scheduler_fixtures",)


async def fake_node_agent(bus: Bus) -> Subscription:
    """Releases each decided pod's leases, as the node-agent does once Allocate has run."""

    async def on_decided(event: Event) -> None:
        if isinstance(event, AllocationDecided):
            a = event.allocation
            for n in device_counts(a.devices):
                lease = await bus.lease(lease_key(a.node, n), a.pod_uid, auto_renew=False)
                await lease.release()

    return await bus.subscribe("gpubus.allocation.decided.>", on_decided, deliver="new")


@pytest.fixture
async def agent(bus: Bus) -> AsyncIterator[Subscription]:
    sub = await fake_node_agent(bus)
    yield sub
    await sub.stop()


async def create(kube: SimKubeClient, pod: dict[str, Any]) -> dict[str, Any]:
    return dict(await kube.create_pod("default", pod))  # type: ignore[arg-type]


async def add_node(
    bus: Bus, kube: SimKubeClient, *apps: SchedulerApp, node: str = "n1", **inventory: Any
) -> None:
    """Node object and inventory of ``node``, once every one of ``apps`` has it in its ledger."""
    await create_node(kube, node)
    await register_node(bus, node, **inventory)
    for app in apps:
        await wait_until(lambda app=app: NodeName(node) in app.ledger, what="inventory")


@dataclass(kw_only=True)
class Schedulers:
    """The schedulers a test starts, each with its settings over the harness defaults; all are
    stopped when the test ends, the newest first."""

    bus: Bus
    kube: SimKubeClient
    nats_url: str
    kubeconfig: Path
    stack: contextlib.AsyncExitStack
    session: aiohttp.ClientSession

    async def start(self, **settings: Any) -> SchedulerApp:
        return await self.stack.enter_async_context(
            scheduler_app(bus_settings(self.nats_url), self.kubeconfig, **settings))

    async def leader_of_n1(self, **settings: Any) -> SchedulerApp:
        """A scheduler that leads and has node n1 in its ledger."""
        app = await self.start(**settings)
        await wait_until(lambda: app.election.is_leader, what="leadership")
        await add_node(self.bus, self.kube, app)
        return app

    async def replicas(self, *names: str) -> list[SchedulerApp]:
        """Replicas with a 1 s leader TTL: the first leads before the others start, and those have
        node n1 in their ledgers."""
        first = await self.start(replica_id=names[0], leader_ttl_s=1.0)
        await wait_until(lambda: first.election.is_leader, what="first leader")
        others = [await self.start(replica_id=name, leader_ttl_s=1.0) for name in names[1:]]
        await add_node(self.bus, self.kube, *others)
        return [first, *others]

    async def standby_of(self, leader: str, *, serving: QueryHandler | None = None,
                         **settings: Any) -> SchedulerApp:
        """A standby ("standby") that has node n1 and knows ``leader`` as the leader: a holder of the
        leader lease (renewed until the standby has stopped) that answers forwarded binds with
        ``serving``, or serves nothing."""
        ghost = await self.bus.lease("leader.scheduler", leader, ttl=30.0, auto_renew=True)
        assert await ghost.acquire()
        self.stack.push_async_callback(ghost.release)  # after the standby has stopped
        if serving is not None:
            service = await self.bus.serve(BIND_SUBJECT, serving)
            self.stack.push_async_callback(service.stop)
        standby = await self.start(replica_id="standby", **settings)
        await add_node(self.bus, self.kube, standby)
        await wait_until(lambda: standby.election.leader == leader, what="leader known")
        return standby

    async def bind(self, app: SchedulerApp, pod: dict[str, Any]) -> str:
        """``pod`` bound to n1 through ``app``'s extender: "" or the extender's error."""
        return await ExtenderClient(self.session, app.port).bind(pod, "n1")


@pytest.fixture
async def schedulers(
    bus: Bus, nats_url: str, kube: SimKubeClient, api: SimApiServer, tmp_path: Path
) -> AsyncIterator[Schedulers]:
    kubeconfig = api.write_kubeconfig(tmp_path / "kc")
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        yield Schedulers(
            bus=bus, kube=kube, nats_url=nats_url, kubeconfig=kubeconfig, stack=stack, session=session
        )


async def create_pods(kube: SimKubeClient, *names: str) -> list[dict[str, Any]]:
    """One-card 1000 MiB pods of these names."""
    return [await create(kube, gpu_pod(name, slice_of(1000))) for name in names]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_concurrent_binds_onto_one_node_never_over_commit(  # noqa: PLR0917 (fixtures)
    bus: Bus,
    kube: SimKubeClient,
    scheduler: SchedulerApp,
    client: ExtenderClient,
    agent: Subscription,
    seed: int,
) -> None:
    rng = random.Random(seed)
    await add_node(bus, kube, scheduler, node="hot", gpus=2, count=4)
    pods = []
    for i in range(24):
        limits = slice_of(
            rng.choice([5000, 20_000, 40_000]), rng.choice([0, 10, 30, 60]), count=rng.choice([1, 1, 2])
        )
        pods.append(await create(kube, gpu_pod(f"p{seed}-{i}", limits)))
    errors = await asyncio.gather(*(client.bind(p, "hot") for p in pods))
    bound = [p for p, e in zip(pods, errors, strict=True) if e == ""]
    assert bound, errors
    assert all("does not fit" in e for e in errors if e), errors
    for i in range(2):
        u = scheduler.ledger.usage(NodeName("hot"), DeviceUUID(f"GPU-hot-{i}"))
        assert u.used <= 4 and u.usedmem <= GPU_MEM and u.usedcores <= 100
    total = sum(scheduler.ledger.usage(NodeName("hot"), DeviceUUID(f"GPU-hot-{i}")).usedmem for i in range(2))
    expected = sum(
        int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"])
        * int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        for p in bound
    )
    assert total == expected


async def test_a_lease_freed_by_the_node_agent_is_taken_in_one_write(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient, agent: Subscription
) -> None:
    await add_node(bus, kube, scheduler)
    key = lease_key("n1", 1)
    writes: list[str] = []

    async def on_write(msg: Any) -> None:
        if msg.headers and msg.headers.get("KV-Operation") != "DEL" and msg.data:
            writes.append(msg.data.decode())  # a create attempt, by the owner it names

    named: list[dict[str, int]] = []

    async def on_decided(event: Event) -> None:
        if isinstance(event, AllocationDecided):
            named.append(event.leases)

    sub = await bus.nc.subscribe(f"$KV.locks.{key}", cb=on_write)
    decisions = await bus.subscribe("gpubus.allocation.decided.>", on_decided, deliver="new")
    pods = await create_pods(kube, "one", "two", "three")
    for pod in pods:
        assert await client.bind(pod, "n1") == ""
        await wait_until(lambda: scheduler.leases.freed_at(key) is not None, what="the agent's release")
    await bus.nc.flush()
    await sub.unsubscribe()
    await wait_until(lambda: len(named) == 3, what="three decisions")
    await decisions.stop()
    assert writes == [p["metadata"]["uid"] for p in pods]  # no create that fails over the marker
    assert all(list(leases) == [key] and leases[key] > 0 for leases in named)  # for the node-agent


async def test_lease_of_a_gone_owner_is_taken_over_at_once(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    await add_node(bus, kube, scheduler)
    key = lease_key("n1", 1)
    stale = await bus.lease(key, "pod-that-is-gone", auto_renew=False)
    assert await stale.acquire()
    await wait_until(lambda: scheduler.leases.holder_hint(key) == "pod-that-is-gone", what="the hint")
    writes: list[str] = []

    async def on_write(msg: Any) -> None:
        deleting = msg.headers and msg.headers.get("KV-Operation") == "DEL"
        writes.append("delete" if deleting else msg.data.decode())

    sub = await bus.nc.subscribe(f"$KV.locks.{key}", cb=on_write)
    await bus.nc.flush()  # the server has our subscription before the scheduler's connection writes
    pod = await create(kube, gpu_pod("p", slice_of(1000)))
    assert await client.bind(pod, "n1") == ""
    await bus.nc.flush()
    await sub.unsubscribe()
    assert await stale.holder() == pod["metadata"]["uid"]
    assert scheduler.leases.takeovers == 1
    assert writes == ["delete", pod["metadata"]["uid"]]  # at the watched revisions: no failed write


async def test_live_holder_is_waited_for_until_its_ttl_runs_out(
    kube: SimKubeClient, schedulers: Schedulers
) -> None:
    app = await schedulers.leader_of_n1(lease_ttl_s=1.0, bind_timeout_s=15.0, replica_id="ttl")
    first, second = await create_pods(kube, "first", "second")
    other_size = await create(kube, gpu_pod("pair", slice_of(1000, count=2)))
    assert await schedulers.bind(app, first) == ""  # no node-agent: its lease stays until the TTL
    assert await schedulers.bind(app, other_size) == ""  # alloc.n1.2 is a different key: no wait
    assert await schedulers.bind(app, second) == ""
    entry = await (await app.bus.kv("locks")).get(lease_key("n1", 1))
    assert entry is not None and entry.value.decode() == second["metadata"]["uid"]


async def test_bind_gives_up_naming_the_holder_when_the_budget_runs_out(
    kube: SimKubeClient, schedulers: Schedulers
) -> None:
    app = await schedulers.leader_of_n1(lease_ttl_s=20.0, bind_timeout_s=0.5, replica_id="impatient")
    first, second = await create_pods(kube, "first", "second")
    assert await schedulers.bind(app, first) == ""
    error = await schedulers.bind(app, second)
    assert f"Allocate lease alloc.n1.1 is still held by pod {first['metadata']['uid']}" in error
    assert app.ledger.entry(second["metadata"]["uid"]) is None
    first_entry = app.ledger.entry(first["metadata"]["uid"])
    assert first_entry is not None and first_entry.state is AllocationState.DECIDED


async def test_standby_takes_over_when_the_leader_dies(kube: SimKubeClient, schedulers: Schedulers) -> None:
    leader, standby = await schedulers.replicas("leader", "standby")
    assert not standby.election.is_leader
    await leader.bus.nc.close()  # the leader's process dies: no release, renewals stop
    await wait_until(lambda: standby.election.is_leader, timeout=15, what="takeover")
    [pod] = await create_pods(kube, "after")
    assert await schedulers.bind(standby, pod) == ""


async def test_standby_without_an_answering_leader_says_so_in_the_bind_error(
    kube: SimKubeClient, schedulers: Schedulers
) -> None:
    # a leader that holds the lease but serves nothing
    standby = await schedulers.standby_of("ghost-replica", forward_timeout_s=1.0)
    [pod] = await create_pods(kube, "orphan")
    error = await schedulers.bind(standby, pod)
    assert "no leader answered the forwarded bind on gpubus.query.scheduler.bind" in error
    assert "ghost-replica" in error
    assert standby.ledger.entry(pod["metadata"]["uid"]) is None


async def test_a_leader_whose_bind_raises_answers_the_standby_with_the_failure(
    kube: SimKubeClient, schedulers: Schedulers
) -> None:
    """Not silence until the standby's timeout, reported as "no leader": the leader's error reply."""

    async def broken_bind(payload: bytes) -> bytes:
        raise RuntimeError("bind exploded")

    standby = await schedulers.standby_of("broken-replica", serving=broken_bind, forward_timeout_s=5.0)
    [pod] = await create_pods(kube, "victim")
    error = await schedulers.bind(standby, pod)
    assert "the leader failed serving the forwarded bind" in error
    assert "RuntimeError: bind exploded" in error
    assert standby.ledger.entry(pod["metadata"]["uid"]) is None
    labels = {"verb": "bind", "outcome": "leader_error"}
    assert standby.metrics.registry.get_sample_value("gpubus_scheduler_decisions_total", labels) == 1


async def test_after_failover_the_old_standby_serves_forwarded_binds(
    kube: SimKubeClient, schedulers: Schedulers
) -> None:
    first, second, third = await schedulers.replicas("first", "second", "third")
    await first.bus.nc.close()  # the leader dies without releasing its lease
    await wait_until(
        lambda: second.election.is_leader or third.election.is_leader, timeout=15, what="takeover"
    )
    leader, standby = (second, third) if second.election.is_leader else (third, second)
    [pod] = await create_pods(kube, "after")
    assert await schedulers.bind(standby, pod) == ""
    assert leader.ledger.entry(pod["metadata"]["uid"]) is not None


async def test_a_forwarded_bind_waits_for_a_leader_still_subscribing(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failover: the new leader subscribes after it has the lease. Nothing serves the subject for
    that moment (NATS answers "no responders" at once); the standby asks again within its budget
    instead of failing the bind at once."""
    misses = 0
    request = bus.request

    async def counting_request(subject: str, payload: bytes, timeout: float = 1.0) -> bytes:  # noqa: ASYNC109
        nonlocal misses
        try:
            return await request(subject, payload, timeout=timeout)
        except NoResponders:
            misses += 1
            raise

    monkeypatch.setattr(bus, "request", counting_request)
    standby = BindForwarder(bus, timeout_s=10.0, leader_name=lambda: "next")
    args = BindingArgs(pod_name="p", pod_namespace="default", pod_uid="uid-1", node="n1")
    forwarded = asyncio.create_task(standby.forward(args))
    await wait_until(lambda: misses >= 2 or forwarded.done(), what="two tries into no responder")
    assert not forwarded.done()
    served: list[BindingArgs] = []

    async def local_bind(got: BindingArgs) -> tuple[str, str]:
        served.append(got)
        return "bound", ""

    leader = BindForwarder(bus, timeout_s=1.0, leader_name=lambda: None)
    await leader.serve(local_bind)
    try:
        assert await asyncio.wait_for(forwarded, 5.0) == ("forwarded", "")
    finally:
        await leader.stop()
    assert served == [args]


async def test_a_pod_deleted_while_the_replica_did_not_lead_is_released_when_it_leads_again(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient
) -> None:
    """The fault matrix's case: a leader's term ends (NATS lost quorum), the pod it bound is
    deleted meanwhile (no event reaches a replica that does not watch), and when the replica leads
    again its reconcile must not take the old term's view of the pod for a live one."""
    await add_node(bus, kube, scheduler)
    pod = await create(kube, gpu_pod("bound-then-gone", slice_of(1000)))
    uid = pod["metadata"]["uid"]
    assert await client.bind(pod, "n1") == ""  # no node-agent: the entry stays DECIDED
    reconciler: Any = scheduler.reconciler  # its view of the pod (private: nothing else needs it)
    await wait_until(lambda: reconciler.live(uid) is not None and uid not in reconciler._unbound,
                     what="the pod watch seeing it bound")
    await scheduler._deposed()  # the term ends as the election ends it
    await kube.delete_pod("default", "bound-then-gone")
    assert scheduler.ledger.entry(uid) is not None
    await scheduler._elected()  # and a new one begins
    await wait_until(lambda: scheduler.ledger.entry(uid) is None, 15, what="the gone pod's entry released")


async def test_a_bind_whose_wait_outlasts_the_term_decides_nothing(
    bus: Bus, kube: SimKubeClient, schedulers: Schedulers
) -> None:
    app = await schedulers.leader_of_n1(lease_ttl_s=20.0, bind_timeout_s=15.0, replica_id="term")
    first, second = await create_pods(kube, "first", "second")
    assert await schedulers.bind(app, first) == ""  # no node-agent: its lease stays held
    waiting = asyncio.create_task(schedulers.bind(app, second))
    await wait_until(lambda: app.binder.binding(second["metadata"]["uid"]), what="the second bind waiting")
    app.election.is_leader = False  # the term ends (as the election would end it) while it waits
    lease = await bus.lease(lease_key("n1", 1), first["metadata"]["uid"], auto_renew=False)
    assert await lease.release()
    assert "stopped leading" in await waiting
    assert app.ledger.entry(second["metadata"]["uid"]) is None
