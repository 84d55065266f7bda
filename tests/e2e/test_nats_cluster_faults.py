"""A NATS server lost mid-stream on a 3-server JetStream cluster with R3 stream and buckets.

Case matrix (each on a fresh ``gpubus up --nats-cluster 3`` stack, 3 nodes x 4 A100-80GB split 20):
- the server leading the ``allocations`` bucket's stream (``KV_allocations``, asked of JetStream)
  SIGKILLed while 200 GPU pods are binding, then restarted;
- a server that leads none of the four streams (``GPUBUS`` and the three ``KV_*``) if there is one,
  else one that leads neither ``KV_allocations`` nor ``GPUBUS``, SIGKILLed the same way, then restarted.

After each: every pod Running (none lost or stuck), every ``allocation.decided`` event stored
before the kill still in the stream, and the shared invariants (no over-commit on replay, ledger ==
live pods, no stuck lease). The longest pause in binds after the kill is printed, not asserted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod, running_stack

from shared.bus import ALLOCATIONS, STREAM
from shared.events import AllocationDecided, Event

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PODS = 200
KILL_AFTER = 40
"""Pods bound before the kill: the stream is busy, most pods still to come."""


@pytest_asyncio.fixture
async def e2e(tmp_path: Path) -> AsyncIterator[E2E]:
    async with running_stack(tmp_path / "stack", nodes=3, devices="4xA100-80GB", split_count=20,
                             configure=lambda s: dataclasses.replace(s, nats_cluster=3)) as handle:
        yield handle


class BindClock:
    """When each pod first showed a node (from the test's pod watch): binds over time."""

    def __init__(self, e2e: E2E) -> None:
        self._e2e = e2e
        self.bound_at: dict[str, float] = {}
        self._task = asyncio.create_task(self._follow(), name="bind-clock")

    async def _follow(self) -> None:
        while True:
            now = time.monotonic()
            for name, pod in list(self._e2e.pods.items()):
                if name not in self.bound_at and (pod.get("spec") or {}).get("nodeName"):
                    self.bound_at[name] = now
            await asyncio.sleep(0.005)  # the watch cache has no change signal; this samples it

    def longest_pause_after(self, since: float) -> tuple[float, float]:
        """(first bind after ``since``, longest pause between binds from ``since`` on), seconds."""
        times = sorted(t for t in self.bound_at.values() if t >= since)
        assert times, "no pod was bound after the kill"
        edges = [since, *times]
        return times[0] - since, max(b - a for a, b in itertools.pairwise(edges))

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


STREAMS = (STREAM, "KV_inventory", f"KV_{ALLOCATIONS}", "KV_locks")


async def leaders(e2e: E2E) -> dict[str, str]:
    """Stream -> the server leading it, as JetStream reports it (every stream at R3)."""
    found = {}
    for name in STREAMS:
        info = await e2e.bus.js.stream_info(name)
        assert info.config.num_replicas == 3 and info.cluster is not None and info.cluster.leader, name
        found[name] = info.cluster.leader
    return found


async def allocations_leader(e2e: E2E) -> str:
    return (await leaders(e2e))[f"KV_{ALLOCATIONS}"]


async def a_non_leader(e2e: E2E) -> str:
    """A server leading no stream if there is one, else one leading neither KV_allocations nor GPUBUS."""
    led = await leaders(e2e)
    servers = list(e2e.stack.nats_cluster.servers)
    candidates = [n for n in servers if n not in led.values()] or \
                 [n for n in servers if n not in (led[STREAM], led[f"KV_{ALLOCATIONS}"])]
    assert candidates, f"no server leads neither KV_allocations nor GPUBUS: {led}"
    return candidates[0]


async def run_through_a_server_loss(e2e: E2E, pick: Callable[[E2E], Awaitable[str]]) -> None:
    """Orchestration of both cases: pods streaming in, one server killed and revived, then the checks."""
    assert {n: (await e2e.bus.js.stream_info(n)).config.num_replicas
            for n in (STREAM, "KV_inventory", f"KV_{ALLOCATIONS}", "KV_locks")} == dict.fromkeys(
        (STREAM, "KV_inventory", f"KV_{ALLOCATIONS}", "KV_locks"), 3)
    decided: list[str] = []

    async def record(event: Event) -> None:
        assert isinstance(event, AllocationDecided)
        decided.append(event.id)
    watcher = await e2e.bus.subscribe("gpubus.allocation.decided.>", record, deliver="all")
    clock = BindClock(e2e)
    pods = [gpu_pod(f"p-{i}", mem=1000, cores=5) for i in range(PODS)]
    creating = asyncio.create_task(e2e.create(*pods), name="create-pods")
    try:
        await wait_until(lambda: len(clock.bound_at) >= KILL_AFTER, 90, what=f"{KILL_AFTER} pods bound")
        victim = await pick(e2e)
        led = sorted(s for s, leader in (await leaders(e2e)).items() if leader == victim)
        stored_before = set(decided)  # a JetStream consumer sees only what the stream stored
        killed_at = time.monotonic()
        await asyncio.to_thread(e2e.stack.nats_cluster.kill, victim)
        await creating
        await e2e.wait_phase([p["metadata"]["name"] for p in pods], {"Running"}, timeout=120)
        first, pause = clock.longest_pause_after(killed_at)
        bound_before = sum(1 for t in clock.bound_at.values() if t < killed_at)
        print(f"\n{victim} (leading {', '.join(led) or 'no stream'}) killed with {bound_before}/{PODS} pods "
              f"bound: first bind after the kill "
              f"+{first:.2f}s, longest pause in binds {pause:.2f}s; all {PODS} Running "
              f"+{max(clock.bound_at.values()) - killed_at:.2f}s after the kill")
        await asyncio.to_thread(e2e.stack.nats_cluster.revive, victim)
    finally:
        await clock.stop()
        await watcher.stop()
        if not creating.done():
            creating.cancel()
        await asyncio.gather(creating, return_exceptions=True)
    events = await e2e.tap_replay()
    in_stream = {e["id"] for e in events if e.get("kind") == "allocation.decided"}
    assert stored_before, "no decision was stored before the kill"
    assert stored_before <= in_stream, f"{len(stored_before - in_stream)} decided events lost"
    await e2e.check_invariants()


async def test_allocations_leader_killed_while_binding_loses_nothing(e2e: E2E) -> None:
    await run_through_a_server_loss(e2e, allocations_leader)


async def test_a_non_leader_killed_while_binding_loses_nothing(e2e: E2E) -> None:
    await run_through_a_server_loss(e2e, a_non_leader)
