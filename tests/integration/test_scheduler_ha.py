"""Concurrency and high availability: no over-commit under concurrent binds, the Allocate handoff
slots, and leader failover.

Matrix: many concurrent binds of random sizes onto one node (several seeds) with a node-agent
stand-in that reports Allocate served on ``allocation.decided``; a bind decides with one fenced
ledger write and nothing in the ``locks`` bucket; a slot held by a pod that is deleted is freed by
its release; a slot held by a live pod is waited for until Allocate served it (its verdict, or its
pod seen running when the verdict was lost), or the bind gives up
with an Error naming the holder; pods of different sizes never wait for each other; the leader dies
without releasing and a standby takes over and binds.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from asyncwait import wait_until
from scheduler_harness import GPU_MEM, ExtenderClient, allocate_ran, gpu_pod, slice_of
from scheduler_replicas import Schedulers, add_node, create, create_pods

from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from services.scheduler.forward import BindForwarder
from services.scheduler.wire import BindingArgs
from shared.bus import Bus, NoResponders, Subscription
from shared.model import AllocationState, DeviceUUID, NodeName

pytest_plugins = ("scheduler_fixtures",)


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


async def test_a_bind_decides_in_one_fenced_write_and_nothing_in_the_locks_bucket(
    bus: Bus, kube: SimKubeClient, scheduler: SchedulerApp, client: ExtenderClient, agent: Subscription
) -> None:
    await add_node(bus, kube, scheduler)
    writes: list[tuple[str, dict[str, str]]] = []

    async def on_write(msg: Any) -> None:
        writes.append((msg.subject, dict(msg.headers or {})))

    subs = [await bus.nc.subscribe(subject, cb=on_write)
            for subject in ("$KV.locks.>", "$KV.allocations.>")]
    await bus.nc.flush()  # the server has our subscriptions before the scheduler's connection writes
    pods = await create_pods(kube, "one", "two", "three")
    for pod in pods:
        assert await client.bind(pod, "n1") == ""
    uids = [p["metadata"]["uid"] for p in pods]
    applied = AllocationState.APPLIED
    await wait_until(lambda: all(getattr(scheduler.ledger.entry(uid), "state", None) is applied
                                 for uid in uids), what="every pod allocated")
    await bus.nc.flush()
    for sub in subs:
        await sub.unsubscribe()
    assert not [subject for subject, _ in writes if subject.startswith("$KV.locks.")]
    fence = "Nats-Expected-Last-Subject-Sequence-Subject"
    decided = [(subject, headers) for subject, headers in writes
               if subject.removeprefix("$KV.allocations.") in uids and fence in headers]
    assert [subject for subject, _ in decided] == [f"$KV.allocations.{uid}" for uid in uids]
    term = scheduler.state.term
    assert term is not None
    for _, headers in decided:
        assert headers[fence] == "$KV.allocations.term.scheduler"
        assert headers["Nats-Expected-Last-Subject-Sequence"] == str(term)


async def test_a_slot_whose_holder_is_deleted_is_free_once_its_entry_is_released(
    kube: SimKubeClient, schedulers: Schedulers
) -> None:
    app = await schedulers.leader_of_n1(bind_timeout_s=15.0, replica_id="gone")
    first, second = await create_pods(kube, "first", "second")
    assert await schedulers.bind(app, first) == ""  # no node-agent: its entry stays DECIDED
    waiting = asyncio.create_task(schedulers.bind(app, second))
    await wait_until(lambda: app.binder.binding(second["metadata"]["uid"]), what="the second bind waiting")
    assert app.ledger.entry(second["metadata"]["uid"]).state is AllocationState.RESERVED  # type: ignore[union-attr]
    await kube.delete_pod("default", "first")  # the pod watch releases its entry
    assert await waiting == ""
    assert app.ledger.entry(first["metadata"]["uid"]) is None


async def test_a_live_holder_is_waited_for_until_allocate_served_it(
    bus: Bus, kube: SimKubeClient, schedulers: Schedulers
) -> None:
    app = await schedulers.leader_of_n1(bind_timeout_s=15.0, replica_id="wait")
    first, second = await create_pods(kube, "first", "second")
    other_size = await create(kube, gpu_pod("pair", slice_of(1000, count=2)))
    assert await schedulers.bind(app, first) == ""  # no node-agent: its entry stays DECIDED
    assert await schedulers.bind(app, other_size) == ""  # 2-card containers: another slot, no wait
    waiting = asyncio.create_task(schedulers.bind(app, second))
    await wait_until(lambda: app.binder.binding(second["metadata"]["uid"]), what="the second bind waiting")
    await allocate_ran(bus, first, "n1")
    assert await waiting == ""
    entry = app.ledger.entry(second["metadata"]["uid"])
    assert entry is not None and entry.state is AllocationState.DECIDED


async def test_a_holder_whose_pod_runs_frees_its_slot_without_its_verdict(
    bus: Bus, kube: SimKubeClient, schedulers: Schedulers
) -> None:
    """The node-agent's allocation.applied was lost (its process died after Allocate): the pod
    running on its node says Allocate ran, so the next pod of its size is not held up for its life."""
    app = await schedulers.leader_of_n1(bind_timeout_s=15.0, replica_id="lost-verdict")
    first, second = await create_pods(kube, "first", "second")
    assert await schedulers.bind(app, first) == ""  # no node-agent: no verdict will come
    waiting = asyncio.create_task(schedulers.bind(app, second))
    await wait_until(lambda: app.binder.binding(second["metadata"]["uid"]), what="the second bind waiting")
    await kube.patch_pod_status("default", "first", {"status": {"phase": "Running"}})
    assert await waiting == ""
    entry = app.ledger.entry(first["metadata"]["uid"])
    assert entry is not None and entry.state is AllocationState.APPLIED


async def test_bind_gives_up_naming_the_holder_when_the_budget_runs_out(
    kube: SimKubeClient, schedulers: Schedulers
) -> None:
    app = await schedulers.leader_of_n1(bind_timeout_s=0.5, replica_id="impatient")
    first, second = await create_pods(kube, "first", "second")
    assert await schedulers.bind(app, first) == ""
    error = await schedulers.bind(app, second)
    assert f"Allocate handoff slot n1/1 is still held by pod {first['metadata']['uid']}" in error
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
    app = await schedulers.leader_of_n1(bind_timeout_s=15.0, replica_id="term")
    first, second = await create_pods(kube, "first", "second")
    assert await schedulers.bind(app, first) == ""  # no node-agent: its entry holds the slot
    waiting = asyncio.create_task(schedulers.bind(app, second))
    await wait_until(lambda: app.binder.binding(second["metadata"]["uid"]), what="the second bind waiting")
    app.election.is_leader = False  # the term ends (as the election would end it) while it waits
    await allocate_ran(bus, first, "n1")
    assert "stopped leading" in await waiting
    assert app.ledger.entry(second["metadata"]["uid"]) is None
