"""Two schedulers that both believe they lead (issue 32): fencing at the store, whole apps on one
real nats-server.

A partition is made the way it looks to the old leader: its lease renewals stop reaching anyone
(``abdicate_without_release``) and nothing tells it so, while a standby takes the lease and begins a
newer term. Cases: the old leader's bind is refused by JetStream (its DECIDED write is fenced on the
old term): nothing stored, no decision sent, the pod not bound, the old leader steps down on the
refusal, and the new leader binds the pod; a bind
of the old leader that waited for a handoff slot and decides only after the new term began (a stale
decision arriving late) is refused alike; a new leader serializes behind a decision of the old
term it found in the ledger (the handoff slot survives the failover), and replays the verdict
that frees it even when it was published while no replica led, longer ago than the usual window.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import allocate_ran, scheduler_settings
from scheduler_replicas import Schedulers, create_pods

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from shared.bus import ALLOCATIONS, Bus
from shared.model import AllocationState, NodeName, PodUID

pytest_plugins = ("scheduler_fixtures",)


async def partitioned(schedulers: Schedulers) -> tuple[SchedulerApp, SchedulerApp]:
    """(old, new): both believe they lead; new's term is the newer one."""
    old, new = await schedulers.replicas("old", "new")
    await wait_until(lambda: old.state.term is not None, what="the old term")
    await old.election.abdicate_without_release()  # its renewals no longer arrive
    await wait_until(lambda: new.election.is_leader and new.state.term is not None, timeout=15,
                     what="the new leader's term")
    assert old.election.is_leader and old.state.term is not None  # nothing told it otherwise
    assert old.state.term < new.state.term
    return old, new


async def unbound(kube: SimKubeClient, pod: dict[str, Any]) -> bool:
    got = await kube.get_pod("default", pod["metadata"]["name"])
    return got is not None and not (got.get("spec") or {}).get("nodeName")


async def test_the_deposed_leaders_bind_is_refused_by_the_store_and_binds_nothing(
        bus: Bus, kube: SimKubeClient, schedulers: Schedulers) -> None:
    old, new = await partitioned(schedulers)
    [pod] = await create_pods(kube, "contested")
    uid = pod["metadata"]["uid"]
    error = await schedulers.bind(old, pod)
    assert "no longer leads" in error, error
    assert await (await bus.kv(ALLOCATIONS)).get(uid) is None
    assert old.ledger.entry(PodUID(uid)) is None  # its reservation went with the refusal
    assert await unbound(kube, pod)
    await wait_until(lambda: not old.election.is_leader, what="the fenced leader stepping down")
    assert old.state.term is None and new.election.is_leader
    assert await schedulers.bind(new, pod) == ""
    entry = new.ledger.entry(PodUID(uid))
    assert entry is not None and entry.state is AllocationState.DECIDED


async def test_a_stale_decision_arriving_after_the_new_term_is_refused(
        bus: Bus, kube: SimKubeClient, schedulers: Schedulers) -> None:
    old, new = await schedulers.replicas("old", "new")
    first, late = await create_pods(kube, "first", "late")
    assert await schedulers.bind(old, first) == ""  # no node-agent: it holds n1's 1-card slot
    waiting = asyncio.create_task(schedulers.bind(old, late))
    await wait_until(lambda: old.binder.binding(late["metadata"]["uid"]),
                     what="the old leader's bind waiting")
    await old.election.abdicate_without_release()
    await wait_until(lambda: new.election.is_leader and new.state.term is not None, timeout=15,
                     what="the new leader's term")
    assert old.election.is_leader
    await allocate_ran(bus, first, "n1")  # the slot frees: the old leader decides, late
    error = await waiting
    assert "no longer leads" in error, error
    assert await (await bus.kv(ALLOCATIONS)).get(late["metadata"]["uid"]) is None
    assert await unbound(kube, late)


async def test_a_new_leader_waits_for_the_old_terms_decision_to_be_allocated(
        bus: Bus, kube: SimKubeClient, schedulers: Schedulers) -> None:
    old, new = await schedulers.replicas("old", "new")
    first, second = await create_pods(kube, "first", "second")
    assert await schedulers.bind(old, first) == ""  # decided in the old term; no Allocate yet
    await old.bus.nc.close()  # the old leader dies holding nothing but its ledger entry
    await wait_until(lambda: new.election.is_leader, timeout=15, what="takeover")
    waiting = asyncio.create_task(schedulers.bind(new, second))
    await wait_until(lambda: new.binder.binding(second["metadata"]["uid"]), what="the new leader's bind")
    holder = new.slots.holder(NodeName("n1"), 1, PodUID(second["metadata"]["uid"]))
    assert holder == first["metadata"]["uid"]  # the old term's decision, from the rebuilt ledger
    assert not waiting.done()
    await allocate_ran(bus, first, "n1")
    assert await waiting == ""
    entry = new.ledger.entry(PodUID(second["metadata"]["uid"]))
    assert entry is not None and entry.state is AllocationState.DECIDED


async def test_the_next_leader_replays_a_verdict_published_while_no_replica_led(  # noqa: PLR0917
        bus: Bus, kube: SimKubeClient, schedulers: Schedulers, api: SimApiServer, nats_url: str,
        tmp_path: Path) -> None:
    """Every replica down while the kubelet ran Allocate for a pod just bound: its DECIDED entry
    holds the node's slot until the verdict is applied, however long ago it was published."""
    first = await schedulers.leader_of_n1(replica_id="first")
    [pod] = await create_pods(kube, "allocated-meanwhile")
    assert await schedulers.bind(first, pod) == ""
    await schedulers.stack.aclose()  # the leader stops (its lease given back); none leads now
    await allocate_ran(bus, pod, "n1")
    ten_minutes_on = lambda: time.time() + 600  # noqa: E731 - the next replica starts much later
    settings = scheduler_settings(api.write_kubeconfig(tmp_path / "kc2"), replica_id="next")
    async with SchedulerApp(settings, bus_settings(nats_url), clock=ten_minutes_on) as following:
        await wait_until(lambda: following.state.term is not None, what="the next leader's term")
        uid = PodUID(pod["metadata"]["uid"])
        applied = AllocationState.APPLIED
        await wait_until(lambda: getattr(following.ledger.entry(uid), "state", None) is applied,
                         what="the replayed verdict applied")
        assert following.slots.holder(NodeName("n1"), 1, PodUID("another")) is None
