"""The end-to-end harness: a whole ``gpubus up`` stack started in-test through :mod:`gpubus_local.stack`.

:func:`running_stack` yields an :class:`E2E` handle: the :class:`Stack` (restart/kill children,
restart NATS), a Kubernetes client on the stack's kubeconfig, a bus connection for KV reads,
a live pod cache fed by a watch (tests wait on it, never sleep), a pod's Events as ``kubectl
describe`` finds them, per-node fault controls, and :meth:`E2E.check_invariants`, which every test
ends with.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from asyncwait import wait_until
from e2e_invariants import Facts, changes_unseen, check, live_gpu_pod

from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.nodes import control_subject
from gpubus_local.stack import Stack, StackSpec
from shared.bus import ALLOCATIONS, LOCKS, STREAM, Bus, BusSettings
from shared.kube import list_and_watch_pods
from shared.kube_types import Pod as KubePod
from shared.ledger_entries import is_entry_key

Pod = dict[str, Any]
H = TypeVar("H", bound="E2E")

#: Wait between two looks at the invariants while a problem may still be a bind in flight, seconds.
_LOOK_AGAIN_S = 1.0


def gpu_pod(name: str, *, mem: int | None = 2000, cores: int | None = 10, gpus: int = 1,
            pct: int | None = None, duration: str = "inf", annotations: dict[str, str] | None = None,
            init: bool = False, namespace: str = "default") -> Pod:
    """A pod with one GPU container (and optionally a GPU init container of the same shape)."""
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if pct is not None:
        limits["nvidia.com/gpumem-percentage"] = pct
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    spec: dict[str, Any] = {"containers": [container]}
    if init:
        spec["initContainers"] = [{**container, "name": "warmup"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"gpubus.io/sim-duration": duration, **(annotations or {})}},
            "spec": spec}


class E2E:
    """Handles on one running stack."""

    def __init__(self, stack: Stack, kube: SimKubeClient, bus: Bus) -> None:
        self.stack, self.kube, self.bus = stack, kube, bus
        self.pods: dict[str, Pod] = {}
        """name -> latest pod object (default namespace and others), from the watch."""
        self._watch: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()

    async def start_watch(self) -> None:
        async def follow() -> None:
            async for event in list_and_watch_pods(self.kube, synced=self.synced):
                pod = cast(Pod, event["object"])
                key = pod["metadata"]["name"]
                if event["type"] == "DELETED":
                    self.pods.pop(key, None)
                else:
                    self.pods[key] = pod
        self._watch = asyncio.create_task(follow(), name="e2e-pod-watch")
        await asyncio.wait_for(self.synced.wait(), 30)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch

    # -- pods --------------------------------------------------------------------------------
    async def create(self, *pods: Pod) -> None:
        await asyncio.gather(*(self.kube.create_pod(p["metadata"].get("namespace", "default"),
                                                    cast(KubePod, p)) for p in pods))

    def _watch_alive(self) -> None:
        """A dead pod watch would freeze the cache; fail with its error instead of a vague timeout."""
        if self._watch is not None and self._watch.done():
            error = None if self._watch.cancelled() else self._watch.exception()
            raise AssertionError(f"the test's pod watch ended: {error!r}")

    def phase(self, name: str) -> str | None:
        self._watch_alive()
        pod = self.pods.get(name)
        return None if pod is None else (pod.get("status") or {}).get("phase", "Pending")

    async def wait_phase(self, names: list[str], phases: set[str], timeout: float = 30.0) -> None:  # noqa: ASYNC109
        try:
            await wait_until(lambda: all(self.phase(n) in phases for n in names), timeout,
                             what=f"{len(names)} pods in {phases}")
        except AssertionError as e:  # name the laggards as they are now, not as they were at the start
            late = {n: self.phase(n) for n in names if self.phase(n) not in phases}
            raise AssertionError(f"{e}; still not there: {late}") from None

    async def wait_unschedulable(self, name: str, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        def marked() -> bool:
            pod = self.pods.get(name) or {}
            return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                       for c in (pod.get("status") or {}).get("conditions") or [])
        await wait_until(marked, timeout, what=f"{name} marked unschedulable")

    async def wait_event(self, name: str, reason: str, timeout: float = 30.0,  # noqa: ASYNC109
                         namespace: str = "default") -> dict[str, Any]:
        """The Event ``reason`` about pod ``name`` once recorded, found as ``kubectl describe`` finds it."""
        found: list[dict[str, Any]] = []

        async def recorded() -> bool:
            events, _ = await self.kube.list_events(namespace, field_selector=f"involvedObject.name={name}")
            found[:] = [dict(e) for e in events if e.get("reason") == reason]
            return bool(found)
        await wait_until(recorded, timeout, what=f"a {reason} event about {name}")
        return found[0]

    # -- faults ------------------------------------------------------------------------------
    async def node_control(self, node: str, action: str) -> None:
        reply = await self.bus.request(control_subject(node), json.dumps({"action": action}).encode(), 30.0)
        assert json.loads(reply) == {"ok": True}, reply

    # -- facts and invariants ----------------------------------------------------------------
    def admissions(self) -> dict[str, dict[str, Any]]:
        path = self.stack.admissions_log
        if not path.exists():
            return {}
        records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
        return {r["uid"]: r for r in records}

    async def tap_replay(self) -> list[dict[str, Any]]:
        """The whole event history, read back through ``gpubus tap --json --all``."""
        info = await self.bus.js.stream_info(STREAM)
        count = info.state.messages
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpubus", "tap", "--json", "--all", "--nats", self.stack.nats_url,
            "--count", str(count), "--timeout", "60", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
        events = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
        assert len(events) >= count, f"tap replayed {len(events)} of {count} events"
        return events

    async def _keys(self, bucket: str) -> set[str]:
        """The bucket's live keys (the ledger's without the scheduler's term key)."""
        return {k for k in await (await self.bus.kv(bucket)).items() if is_entry_key(k)}

    async def facts(self) -> Facts:
        # The ledger is read between two reads of the pods, back to back: a pod that finishes (its
        # entry released) or is bound meanwhile shows as such in one of them, and the checker
        # accepts it only where the stream, replayed after both, shows its release or decision.
        pods, _ = await self.kube.list_pods()
        ledger, locks = await self._keys(ALLOCATIONS), await self._keys(LOCKS)
        after, _ = await self.kube.list_pods()
        facts = Facts(events=await self.tap_replay(), pods=cast(list[Pod], pods),
                      admissions=self.admissions(), ledger=ledger, locks=locks,
                      pods_after=cast(list[Pod], after))
        if changes_unseen(facts):
            # the scheduler stores the KV change before its outbox publishes the event: one more
            # replay, seconds later, holds an event that was on its way at the time of the reads
            facts = dataclasses.replace(facts, events=await self.tap_replay())
        return facts

    async def check_invariants(self, *, allow_failed: frozenset[str] = frozenset(),
                               settle_s: float = 30.0) -> None:
        """Wait (bounded) for ledger and leases to converge, then assert every invariant.

        A bind still in flight when the load stopped (its pod read just before the delete) holds
        a lease and an entry for a moment, so one look may catch it: a problem counts once it
        outlasts ``settle_s``. What the stream shows (an over-commit on replay) never goes away."""
        async def converged() -> bool:
            pods, _ = await self.kube.list_pods()
            live = {p["metadata"]["uid"] for p in pods if live_gpu_pod(cast(Pod, p))}
            return await self._keys(ALLOCATIONS) == live
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settle_s
        while True:
            with contextlib.suppress(AssertionError):
                await wait_until(converged, max(deadline - loop.time(), 0.1),
                                 what="ledger and leases converge")
            problems = check(await self.facts(), allow_failed=allow_failed)
            if not problems or loop.time() >= deadline:
                break
            await asyncio.sleep(_LOOK_AGAIN_S)
        assert not problems, "invariants violated:\n  " + "\n  ".join(problems[:30])


def e2e_bus_settings(url: str) -> BusSettings:
    return BusSettings(url=url, name="e2e", reconnect_wait_s=0.1, initial_connect_timeout_s=10.0)


@contextlib.asynccontextmanager
async def e2e_handles(stack: Any, handles: Callable[[Any, SimKubeClient, Bus], H]) -> AsyncIterator[H]:
    """The handles on a started stack (a kube client, a bus, the pod watch), closed in reverse."""
    async with contextlib.AsyncExitStack() as exits:
        kube = await SimKubeClient.from_kubeconfig(stack.kubeconfig)
        exits.push_async_callback(kube.close)
        bus = await Bus.connect(e2e_bus_settings(stack.nats_url), source="e2e")
        exits.push_async_callback(bus.close)
        handle = handles(stack, kube, bus)
        exits.push_async_callback(handle.close)
        await handle.start_watch()
        yield handle


@contextlib.asynccontextmanager
async def running_stack(data_dir: Path, *, nodes: int = 3, devices: str = "2xA100-80GB",
                        split_count: int = 10,
                        configure: Callable[[StackSpec], StackSpec] | None = None,
                        **extra: tuple[str, ...]) -> AsyncIterator[E2E]:
    spec = StackSpec(data_dir=data_dir, nodes=nodes, devices=devices, nats_port=0, port_base=0,
                     split_count=split_count, pod_duration="inf", ready_timeout_s=90.0,
                     extra_args={"nodes": ("--heartbeat", "5", "--monitor-interval", "1"), **extra})
    if configure is not None:
        spec = configure(spec)
    stack = Stack(spec)
    await stack.start()
    try:
        async with e2e_handles(stack, E2E) as handle:
            yield handle
    finally:
        await stack.stop()
