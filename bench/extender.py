"""Benchmark of the scheduler extender as kube-scheduler drives it (prints figures, asserts nothing).

One run, real parts: a nats-server subprocess, the SimApiServer, a SchedulerApp on loopback.
1. State at scale: 5000 nodes x 8 GPUs in the ``inventory`` bucket and 100k ledger entries in
   ``allocations``; cold start (process start of the app -> first correct /filter answer) and the
   scheduler's memory (RSS growth of this process across the load, plus the ledger's own size).
2. ``/filter`` round trips with a real ~3 KB pod and 1000 / 5000 ``NodeNames`` (keep-alive,
   sequential, as kube-scheduler sends them), p50/p99.
3. Bind throughput: 80 one-slice pods at once onto one 8 x 10-slot node, and 200 pods onto 200
   nodes. The Allocate handoff serialises same-size pods on a node until the node-agent has run
   Allocate, so this bench runs a node-agent stand-in that releases each pod's lease as soon as it
   sees ``allocation.decided`` (a real kubelet adds its Allocate time per pod on top).

Usage: ``python bench/extender.py [--nodes 5000] [--entries 100000] [--iterations 1000] [--skip-binds]
[--provisional-ttl 0] [--smoke]`` (0: /filter without its provisional slice, to see what that costs;
``--smoke``: 200 nodes, 500 entries, 20 round trips, to prove it runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from natsproc import NatsServerProcess  # noqa: E402

from gpubus_local.sim.apiserver import SimApiServer  # noqa: E402
from services.scheduler.app import SchedulerApp  # noqa: E402
from services.scheduler.settings import SchedulerSettings  # noqa: E402
from shared.bus import ALLOCATIONS, INVENTORY, Bus, BusSettings  # noqa: E402
from shared.codec import to_wire  # noqa: E402
from shared.events import AllocationApplied, AllocationDecided, Event, Inventory  # noqa: E402
from shared.kube import KubeClient  # noqa: E402
from shared.ledger_entries import encode_allocation  # noqa: E402
from shared.model import (  # noqa: E402
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodUID,
)

GPUS = 8
MEM = 81_920


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / (1 << 20)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def real_pod(name: str, uid: str = "", cores: int = 10) -> dict[str, Any]:
    """A pod shaped like what kube-scheduler sends (~3 KB of JSON)."""
    env = [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(20)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid or f"uid-{name}",
            "labels": {"app": "trainer", "team": "ml"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 100},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                    "env": env,
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": "8000",
                            "nvidia.com/gpucores": str(cores),
                            "cpu": "4",
                            "memory": "16Gi",
                        }
                    },
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def inventory(node: str) -> Inventory:
    devices = tuple(
        DeviceInfo(
            id=DeviceUUID(f"GPU-{node}-{i}"), index=i, type="NVIDIA-A100-SXM4-80GB", count=10, devmem=MEM
        )
        for i in range(GPUS)
    )
    return Inventory(devices=devices, node=node, heartbeat_s=3600.0)


async def populate(bus: Bus, nodes: int, entries: int) -> None:
    inv = await bus.kv(INVENTORY)
    allocs = await bus.kv(ALLOCATIONS)
    names = [f"node-{i:05d}" for i in range(nodes)]
    for chunk in range(0, nodes, 500):
        await asyncio.gather(
            *(inv.put(n, msgpack.packb(to_wire(inventory(n)))) for n in names[chunk : chunk + 500])
        )
    for chunk in range(0, entries, 2000):
        batch = []
        for k in range(chunk, min(chunk + 2000, entries)):
            node = names[k % nodes]
            uuid = DeviceUUID(f"GPU-{node}-{(k // nodes) % GPUS}")
            a = Allocation(
                pod_uid=PodUID(f"pod-{k}"),
                namespace="default",
                name=f"pod-{k}",
                node=NodeName(node),
                devices=((ContainerDevice(uuid=uuid, usedmem=2000, usedcores=5),),),
                containers=("main",),
                state=AllocationState.APPLIED,
                decided_at=1.0,
            )
            batch.append(allocs.put(a.pod_uid, encode_allocation(a)))
        await asyncio.gather(*batch)


async def filter_rtt(session: aiohttp.ClientSession, port: int, names: list[str], n: int) -> list[float]:
    data = orjson.dumps({"Pod": real_pod("bench"), "Nodes": None, "NodeNames": names})
    out = []
    for _ in range(n):
        t = time.perf_counter()
        async with session.post(
            f"http://127.0.0.1:{port}/filter", data=data, headers={"Content-Type": "application/json"}
        ) as resp:
            await resp.read()
        out.append((time.perf_counter() - t) * 1000)
    return out


async def node_agent(bus: Bus) -> Any:
    async def on(event: Event) -> None:
        if isinstance(event, AllocationDecided):
            a = event.allocation
            # Allocate served it (the node-agent's word): its handoff slot is free again
            await bus.publish(AllocationApplied(pod_uid=a.pod_uid, namespace=a.namespace, name=a.name,
                                                container="main", device_ids=(), complete=True,
                                                node=a.node))

    return await bus.subscribe("gpubus.allocation.decided.>", on, deliver="new")


async def bind_burst(
    session: aiohttp.ClientSession, port: int, kube: KubeClient, targets: list[tuple[str, str]]
) -> tuple[float, int]:
    pods = [await kube.create_pod("default", real_pod(name, uid="")) for name, _ in targets]  # type: ignore[arg-type]

    async def bind(pod: dict[str, Any], node: str) -> str:
        m = pod["metadata"]
        async with session.post(
            f"http://127.0.0.1:{port}/bind",
            json={"PodName": m["name"], "PodNamespace": "default", "PodUID": m["uid"], "Node": node},
        ) as resp:
            return str((await resp.json())["Error"])

    t = time.perf_counter()
    errors = await asyncio.gather(*(bind(p, node) for p, (_, node) in zip(pods, targets, strict=True)))  # type: ignore[arg-type]
    for e in {e for e in errors if e}:
        print(f"  bind error: {e}")
    return time.perf_counter() - t, sum(1 for e in errors if e)


async def wait_for_node(app: SchedulerApp, node: NodeName) -> None:
    for _ in range(1000):
        if node in app.ledger:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError(f"inventory of {node} never arrived")


async def measure_filters(
    session: aiohttp.ClientSession, app: SchedulerApp, names: list[str], iterations: int
) -> None:
    for count, n in ((1000, iterations), (min(5000, len(names)), max(iterations // 2, 50))):
        await filter_rtt(session, app.port, names[:count], 20)
        rtt = await filter_rtt(session, app.port, names[:count], n)
        print(
            f"/filter {count} NodeNames: p50 {statistics.median(rtt):.2f} ms, "
            f"p99 {pct(rtt, 99):.2f} ms (n={n})"
        )


async def measure_binds(
    session: aiohttp.ClientSession, app: SchedulerApp, bus: Bus, kube: KubeClient, names: list[str]
) -> None:
    await app.reconciler.pods_synced.wait()
    agent_bus = await Bus.connect(bus.settings, source="bench-agent")
    agent = await node_agent(agent_bus)
    inv = await bus.kv(INVENTORY)
    await inv.put("hot", msgpack.packb(to_wire(inventory("hot"))))
    await wait_for_node(app, NodeName("hot"))
    took, failed = await bind_burst(session, app.port, kube, [(f"hot-{i}", "hot") for i in range(80)])
    print(
        f"bind 80 one-slice pods onto one node: all done in {took:.2f}s ({80 / took:.0f} pods/s), "
        f"{failed} errors; goal <= 1 s"
    )
    took, failed = await bind_burst(session, app.port, kube, [(f"wide-{i}", names[i]) for i in range(200)])
    print(f"bind 200 pods onto 200 nodes: {took:.2f}s ({200 / took:.0f} pods/s), {failed} errors")
    await agent.stop()
    await agent_bus.close()


async def cold_start(session: aiohttp.ClientSession, running: contextlib.AsyncExitStack, app: SchedulerApp,
                     names: list[str]) -> None:
    gc.collect()
    before = rss_mib()
    started = time.perf_counter()
    await running.enter_async_context(app)
    first = await filter_rtt(session, app.port, names[:1000], 1)
    cold = time.perf_counter() - started
    gc.collect()
    after = rss_mib()
    print(
        f"cold start to first correct filter: {cold:.2f}s (state load {app.state.loaded_in_s:.2f}s, "
        f"first filter {first[0]:.1f} ms); goal <= 3 s"
    )
    print(
        f"scheduler memory: RSS +{after - before:.0f} MiB for {len(app.ledger.nodes())} nodes and "
        f"{len(app.ledger)} entries (process RSS {after:.0f} MiB); goal <= 200 MiB"
    )


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-extender-"))
    nats = NatsServerProcess(tmp / "nats")
    nats.start()
    bus_settings = BusSettings(url=nats.url, lock_ttl_s=30.0)
    try:
        async with SimApiServer() as api, aiohttp.ClientSession() as session:
            kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
            kube = await KubeClient.from_kubeconfig(kubeconfig)
            bus = await Bus.connect(bus_settings, source="bench")
            await bus.ensure_schema()
            t = time.perf_counter()
            await populate(bus, args.nodes, args.entries)
            print(
                f"populated {args.nodes} nodes x {GPUS} GPUs and {args.entries} ledger entries "
                f"in {time.perf_counter() - t:.1f}s"
            )
            settings = SchedulerSettings(
                bind="127.0.0.1", port=0, kubeconfig=str(kubeconfig), replica_id="bench", label_pods=False,
                provisional_ttl_s=args.provisional_ttl,
            )
            app = SchedulerApp(settings, bus_settings)
            names = [f"node-{i:05d}" for i in range(args.nodes)]
            async with contextlib.AsyncExitStack() as running:
                await cold_start(session, running, app, names)
                await measure_filters(session, app, names, args.iterations)
                if not args.skip_binds:
                    await measure_binds(session, app, bus, kube, names)
            await bus.close()
            await kube.close()
    finally:
        nats.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--skip-binds", action="store_true", help="state, cold start and /filter only")
    parser.add_argument("--provisional-ttl", type=float, default=10.0,
                        help="provisional_ttl_s of the scheduler (0: /filter holds no slice)")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.entries, args.iterations = 200, 500, 20
    asyncio.run(main(args))
