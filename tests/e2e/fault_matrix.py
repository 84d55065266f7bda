"""The fault matrix under steady load, shared by tests/e2e/test_fault_matrix.py and bench/faults.py.

A 3-server NATS cluster stack, supervised as ``gpubus up`` supervises it, takes a steady stream of
small GPU pods (each deleted once Running, so the cluster never fills). In turn: one nats-server
SIGKILLed, the JetStream meta leader SIGKILLed, the scheduler SIGKILLed, the node-agents' process
SIGKILLed, the webhook SIGKILLed (the supervisor brings each back), then two servers of three
stopped (quorum lost) for longer than the nodes' heartbeats stay fresh, and started again. For
each: the time from the fault (from quorum back, for the last) to the next pod bound. The caller
checks the invariants afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod

from gpubus_local.stack_supervise import Supervisor, stack_parts
from shared.errors import GpubusError
from shared.kube import list_and_watch_pods
from shared.kube_types import Pod as KubePod

FAULTS = ("nats-server", "meta-leader", "scheduler", "node-agent", "webhook", "quorum")
#: Pods bound after a fault before the next one: scheduling has resumed, not just one pod.
BOUND_AFTER = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    fault: str
    victim: str
    recovery_s: float
    """From the fault (from quorum back, for ``quorum``) to the next pod bound, seconds."""
    outage_s: float = 0.0
    """How long the fault was held (``quorum`` only), seconds."""


class SteadyLoad:
    """Creates a pod every ``1/rate`` s (retrying refused creates), deletes each once Running, and
    records when each was first bound (from its own pod watch)."""

    def __init__(self, e2e: E2E, *, rate: float) -> None:
        self._e2e, self._interval = e2e, 1.0 / rate
        self.bound_at: dict[str, float] = {}
        self._bound = asyncio.Condition()
        self.create_errors = 0
        self.created = 0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._create(), name="load-create"),
                       asyncio.create_task(self._follow(), name="load-follow")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def bound_since(self, since: float, count: int, timeout: float) -> float:  # noqa: ASYNC109
        """Wait until ``count`` pods were bound after ``since``; the first such bind's time."""
        def after() -> list[float]:
            return sorted(t for t in self.bound_at.values() if t >= since)
        async with asyncio.timeout(timeout), self._bound:
            await self._bound.wait_for(lambda: len(after()) >= count)
        return after()[0]

    async def _create(self) -> None:
        backlog: list[str] = []
        for i in itertools.count():
            backlog.append(f"steady-{i}")
            for name in list(backlog):
                with contextlib.suppress(GpubusError):
                    await self._e2e.kube.create_pod("default", cast(KubePod, gpu_pod(name, mem=500, cores=1)))
                    backlog.remove(name)
                    self.created += 1
                    continue
                self.create_errors += 1
                break  # the webhook or API is down: retry this one first next time
            await asyncio.sleep(self._interval)  # the load's own pace, not a wait for an outcome

    async def _follow(self) -> None:
        async for event in list_and_watch_pods(self._e2e.kube):
            pod = event["object"]
            name = pod["metadata"]["name"]
            if event["type"] == "DELETED" or not name.startswith("steady-"):
                continue
            if pod["spec"].get("nodeName") and name not in self.bound_at:
                async with self._bound:
                    self.bound_at[name] = time.monotonic()
                    self._bound.notify_all()
            running = (pod.get("status") or {}).get("phase") == "Running"
            if running and not pod["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(GpubusError):
                    await self._e2e.kube.delete_pod("default", name)


def meta_leader(e2e: E2E) -> str:
    """The JetStream meta leader, as a server's monitoring endpoint says."""
    cluster = e2e.stack.nats_cluster
    for port in cluster.monitor_ports.values():
        with (contextlib.suppress(OSError, ValueError, KeyError),
              urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz", timeout=2) as reply):
            leader = json.load(reply)["meta_cluster"]["leader"]
            if leader:
                return str(leader)
    raise AssertionError("no server names a JetStream meta leader")


def _sigkill(pid: int | None) -> None:
    assert pid is not None, "the victim is not running"
    os.kill(pid, signal.SIGKILL)


async def run_matrix(e2e: E2E, *, rate: float = 2.0, quorum_hold_s: float = 20.0,
                     per_fault_timeout_s: float = 90.0, faults: tuple[str, ...] = FAULTS,
                     report: Callable[[str], None] = lambda line: None) -> list[Recovery]:
    """Orchestration of the matrix (see the module docstring; ``faults``: which of :data:`FAULTS`,
    in their order); returns one result per fault."""
    supervisor = Supervisor(stack_parts(e2e.stack), report=report)
    supervising = asyncio.create_task(supervisor.run(), name="supervise")
    load = SteadyLoad(e2e, rate=rate)
    load.start()
    results: list[Recovery] = []
    try:
        await load.bound_since(0.0, BOUND_AFTER, per_fault_timeout_s)
        for fault in (f for f in FAULTS if f in faults):
            result = await _one(e2e, supervisor, load, fault, hold_s=quorum_hold_s,
                                within_s=per_fault_timeout_s)
            after = "quorum came back" if fault == "quorum" else "the fault"
            report(f"{result.fault} ({result.victim}): next pod bound {result.recovery_s:.2f}s after {after} "
                   f"({load.created} pods created)")
            results.append(result)
            assert not supervising.done(), "the supervisor gave up"
    finally:
        await load.stop()
        supervising.cancel()
        await asyncio.gather(supervising, return_exceptions=True)
    failed = await drain(e2e)
    report(f"{load.created} pods created, {len(load.bound_at)} bound, {failed} failed kubelet admission "
           "(their device plugin was down), all deleted")
    return results


async def drain(e2e: E2E, within_s: float = 120.0) -> int:
    """Delete every pod of the load and wait until the API server has none; how many had Failed."""
    pods, _ = await e2e.kube.list_pods()
    steady = [p for p in pods if p["metadata"]["name"].startswith("steady-")]
    for pod in steady:
        with contextlib.suppress(GpubusError):
            await e2e.kube.delete_pod("default", pod["metadata"]["name"])

    async def gone() -> bool:
        left, _ = await e2e.kube.list_pods()
        return not any(p["metadata"]["name"].startswith("steady-") for p in left)

    await wait_until(gone, within_s, what="the load's pods deleted")
    return sum(1 for p in steady if (p.get("status") or {}).get("phase") == "Failed")


async def _one(e2e: E2E, supervisor: Supervisor, load: SteadyLoad, fault: str, *, hold_s: float,
               within_s: float) -> Recovery:
    cluster, children = e2e.stack.nats_cluster, e2e.stack.children
    if fault == "quorum":
        leader = meta_leader(e2e)
        down = [next(n for n in cluster.servers if n != leader), leader]
        for name in down:  # stopped, not crashed: the supervisor leaves them to this test
            await asyncio.to_thread(cluster.kill, name)
        await asyncio.sleep(hold_s)  # the outage itself: longer than the nodes' heartbeats stay fresh
        await asyncio.gather(*(asyncio.to_thread(cluster.revive, n) for n in down))
        back = time.monotonic()
        first = await load.bound_since(back, BOUND_AFTER, within_s)
        return Recovery(fault=fault, victim="+".join(down), recovery_s=first - back, outage_s=hold_s)
    victims: dict[str, Callable[[], str]] = {
        "nats-server": lambda: next(n for n in cluster.servers if n != meta_leader(e2e)),
        "meta-leader": lambda: meta_leader(e2e),
        "scheduler": lambda: "scheduler",
        "node-agent": lambda: "agents" if "agents" in children else "nodes",
        "webhook": lambda: "webhook",
    }
    victim = victims[fault]()
    pid = cluster.servers[victim].pid if victim in cluster.servers else children[victim].pid
    restarts = supervisor.restarts[victim]
    at = time.monotonic()
    _sigkill(pid)
    first = await load.bound_since(at, BOUND_AFTER, within_s)
    await wait_until(lambda: supervisor.restarts[victim] > restarts, within_s, what=f"{victim} restarted")
    return Recovery(fault=fault, victim=victim, recovery_s=first - at)

