"""Bus figures against a private nats-server: acknowledged publish and emit throughput,
publish -> handler latency (p50/p99), and the cold-start KV snapshot of 100k allocations.

Run: ``.venv/bin/python bench/bus.py [N_KV]``. Prints figures; asserts nothing.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from natsproc import NatsServerProcess  # noqa: E402

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
    n_kv = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as store, NatsServerProcess(Path(store)) as server:
        bus = await Bus.connect(BusSettings(url=server.url), source="bench")
        await bus.ensure_schema()
        await publish_rate(bus, 3000)
        await emit_rate(bus, 10000)
        await latency(bus, 1000)
        await kv_cold_start(bus, n_kv)
        await bus.close()


if __name__ == "__main__":
    asyncio.run(main())
