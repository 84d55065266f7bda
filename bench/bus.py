"""Bus figures against a private nats-server (or a cluster): acknowledged publish and emit
throughput, publish -> handler latency (p50/p99), KV put and compare-and-set latency, and the
cold-start KV snapshot of 100k allocations.

Run: ``.venv/bin/python bench/bus.py [N_KV] [--cluster 3] [--replicas 3]``: ``--cluster N`` runs N
servers routed over loopback (what ``gpubus up --nats-cluster`` runs), ``--replicas`` the copies of
the stream and buckets (default: 3 on a cluster, else 1). ``--compare [ROUNDS]`` runs one server at
R1 and a 3-server cluster at R1 and at R3 side by side, measuring them in turn, round after round,
so a busy machine's swings hit all three alike, and prints the medians. ``--smoke``: a few events
on one server, to prove it runs. Prints figures; asserts nothing.
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

from gpubus_local.natscluster import EmbeddedCluster  # noqa: E402
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


async def round_figures(bus: Bus, n: int, offset: int) -> dict[str, float]:
    """One round on one setup: acked publish and KV put latency (ms), emit throughput (ev/s)."""
    pub, put = [], []
    kv = await bus.kv("allocations")
    for i in range(n):
        t = time.perf_counter()
        await bus.publish(event(offset + i))
        t2 = time.perf_counter()
        await kv.put(f"cmp-{i}", b"x" * 400)
        pub.append((t2 - t) * 1e3)
        put.append((time.perf_counter() - t2) * 1e3)
    t = time.perf_counter()
    for i in range(5 * n):
        bus.emit(event(offset + n + i))
    await bus.flush(60)
    pub.sort()
    put.sort()
    return {"publish p50": statistics.median(pub), "publish p99": pub[int(n * 0.99)],
            "kv put p50": statistics.median(put), "kv put p99": put[int(n * 0.99)],
            "emit ev/s": 5 * n / (time.perf_counter() - t)}


async def compare(rounds: int) -> None:
    """R1 on one server, R1 and R3 on a 3-server cluster, measured in turn; medians over rounds."""
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as store, contextlib.ExitStack() as stack:
        single = stack.enter_context(NatsServerProcess(Path(store) / "single"))
        cluster = stack.enter_context(EmbeddedCluster(Path(store) / "cluster", size=3, port=0))
        cluster_r1 = stack.enter_context(EmbeddedCluster(Path(store) / "cluster-r1", size=3, port=0))
        setups = {"1 server, R1": (single.url, 1), "3 servers, R1": (cluster_r1.url, 1),
                  "3 servers, R3": (cluster.url, 3)}
        buses = {}
        for name, (url, replicas) in setups.items():
            buses[name] = await Bus.connect(BusSettings(url=url, replicas=replicas), source="bench")
            await buses[name].ensure_schema()
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in setups}
        for r in range(rounds):
            for name, bus in buses.items():
                figures[name].append(await round_figures(bus, 300, r * 10_000))
        for bus in buses.values():
            await bus.close()
    keys = list(next(iter(figures.values()))[0])
    print(f"medians of {rounds} rounds (300 sequential publishes + KV puts, 1500 emits each)")
    print(f"{'':<15}" + "".join(f"{k:>13}" for k in keys))
    for name, rows in figures.items():
        print(f"{name:<15}" + "".join(f"{statistics.median(r[k] for r in rows):>13.2f}" for k in keys))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n_kv", nargs="?", type=int, default=100_000, help="entries of the KV snapshot")
    parser.add_argument("--cluster", type=int, default=1, help="nats-servers (3: a JetStream cluster)")
    parser.add_argument("--replicas", type=int, default=None, help="copies of the stream and buckets")
    parser.add_argument("--compare", type=int, nargs="?", const=7, default=0, metavar="ROUNDS",
                        help="R1 vs R3 side by side, ROUNDS rounds (default 7)")
    parser.add_argument("--smoke", action="store_true", help="a few events of each kind")
    args = parser.parse_args()
    n_kv, publish, emit, paced = (200, 50, 100, 20) if args.smoke else (args.n_kv, 3000, 10000, 1000)
    if args.compare:
        await compare(args.compare)
        return
    replicas = args.replicas or (3 if args.cluster >= 3 else 1)
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as store, contextlib.ExitStack() as stack:
        server = stack.enter_context(
            EmbeddedCluster(Path(store), size=args.cluster, port=0) if args.cluster > 1
            else NatsServerProcess(Path(store)))
        print(f"{args.cluster} server(s), R{replicas}")
        bus = await Bus.connect(BusSettings(url=server.url, replicas=replicas), source="bench")
        await bus.ensure_schema()
        await publish_rate(bus, publish)
        await emit_rate(bus, emit)
        await latency(bus, paced)
        await kv_writes(bus, paced)
        await kv_cold_start(bus, n_kv)
        await bus.close()


if __name__ == "__main__":
    asyncio.run(main())
