"""Bus figures against a private nats-server (or a cluster): acknowledged publish and emit
throughput, publish -> handler latency (p50/p99), KV put and compare-and-set latency, and the
cold-start KV snapshot of 100k allocations.

Run: ``.venv/bin/python bench/bus.py [N_KV] [--cluster 3] [--replicas 3]``: ``--cluster N`` runs N
servers routed over loopback (what ``gpubus up --nats-cluster`` runs), ``--replicas`` the copies of
the stream and buckets (default: 3 on a cluster, else 1). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from natsproc import NatsServerProcess  # noqa: E402

from gpubus.natscluster import EmbeddedCluster  # noqa: E402
from shared.bus import Bus, BusSettings  # noqa: E402
from shared.events import AllocationReleased, Event  # noqa: E402


def event(i: int) -> AllocationReleased:
    return AllocationReleased(pod_uid=f"uid-{i}", namespace="bench", name=f"pod-{i}", why="deleted",
                              node="node-1", source="bench")


async def publish_rate(bus: Bus, n: int) -> None:
    t = time.perf_counter()
    for i in range(n):
        await bus.publish(event(i))
    dt = time.perf_counter() - t
    print(f"publish (acked, sequential) {n / dt:>9,.0f} ev/s  {dt / n * 1e6:7.1f} µs/ev")


async def emit_rate(bus: Bus, n: int) -> None:
    t = time.perf_counter()
    for i in range(n):
        bus.emit(event(i))
    await bus.flush(60)
    dt = time.perf_counter() - t
    print(f"emit (outbox, until acked)  {n / dt:>9,.0f} ev/s")


async def latency(bus: Bus, n: int) -> None:
    got: dict[str, float] = {}
    done = asyncio.Event()

    async def handler(e: Event) -> None:
        got[e.id] = time.perf_counter()
        if len(got) == n:
            done.set()

    sub = await bus.subscribe("gpubus.allocation.>", handler)
    sent: dict[str, float] = {}
    for i in range(n):
        e = event(i)
        sent[e.id] = time.perf_counter()
        await bus.publish(e)
        await asyncio.sleep(0.002)  # paced: measure latency, not queueing
    await asyncio.wait_for(done.wait(), 30)
    await sub.stop()
    ms = sorted((got[k] - sent[k]) * 1e3 for k in sent)
    print(f"publish -> handler latency  p50 {statistics.median(ms):.2f} ms  p99 {ms[int(n * 0.99)]:.2f} ms")


async def kv_writes(bus: Bus, n: int) -> None:
    """Sequential acknowledged KV writes, as a bind does them (a put, then a CAS update of that key)."""
    kv = await bus.kv("allocations")
    puts, updates = [], []
    for i in range(n):
        t = time.perf_counter()
        rev = await kv.put(f"lat-{i}", b"x" * 400)
        t2 = time.perf_counter()
        await kv.update(f"lat-{i}", b"y" * 400, rev)
        updates.append((time.perf_counter() - t2) * 1e3)
        puts.append((t2 - t) * 1e3)
    for what, ms in (("kv put", puts), ("kv update (CAS)", updates)):
        ms.sort()
        print(f"{what:<26}  p50 {statistics.median(ms):.2f} ms  p99 {ms[int(n * 0.99)]:.2f} ms")


async def kv_cold_start(bus: Bus, n: int) -> None:
    kv = await bus.kv("allocations")
    value = b"x" * 400
    for i in range(0, n, 2000):
        await asyncio.gather(*(kv.put(f"pod-{j}", value) for j in range(i, min(n, i + 2000))))
    times = []
    for _ in range(3):
        t = time.perf_counter()
        items = await kv.items()
        times.append(time.perf_counter() - t)
    print(f"kv snapshot of {len(items):,} entries (400 B)  median {statistics.median(times):.2f} s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n_kv", nargs="?", type=int, default=100_000, help="entries of the KV snapshot")
    parser.add_argument("--cluster", type=int, default=1, help="nats-servers (3: a JetStream cluster)")
    parser.add_argument("--replicas", type=int, default=None, help="copies of the stream and buckets")
    args = parser.parse_args()
    replicas = args.replicas or (3 if args.cluster >= 3 else 1)
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as store, contextlib.ExitStack() as stack:
        server = stack.enter_context(
            EmbeddedCluster(Path(store), size=args.cluster, port=0) if args.cluster > 1
            else NatsServerProcess(Path(store)))
        print(f"{args.cluster} server(s), R{replicas}")
        bus = await Bus.connect(BusSettings(url=server.url, replicas=replicas), source="bench")
        await bus.ensure_schema()
        await publish_rate(bus, 3000)
        await emit_rate(bus, 10000)
        await latency(bus, 1000)
        await kv_writes(bus, 1000)
        await kv_cold_start(bus, args.n_kv)
        await bus.close()


if __name__ == "__main__":
    asyncio.run(main())
