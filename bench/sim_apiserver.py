"""Benchmark: the simulated API server through the real SimKubeClient (create, bind, status, watch).

Prints p50/p99 per verb and sustained requests/s with N concurrent clients, plus watch fan-out
delivery (events/s to a watcher per node). Run: ``.venv/bin/python bench/sim_apiserver.py [--smoke]``
(``--smoke``: 40 pods on 4 nodes, to prove it runs).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient

PODS = 2000
CONCURRENCY = 32
NODES = 100


def pct(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))] * 1000


async def timed(samples: list[float], coro: object) -> None:
    start = time.perf_counter()
    await coro  # type: ignore[misc]
    samples.append(time.perf_counter() - start)


async def run_verb(name: str, make: list[object]) -> None:
    samples: list[float] = []
    queue = list(make)
    start = time.perf_counter()

    async def worker() -> None:
        while queue:
            await timed(samples, queue.pop())

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    wall = time.perf_counter() - start
    print(f"{name:<14} n={len(samples):>5}  {len(samples) / wall:8.0f} req/s  "
          f"p50 {pct(samples, .5):6.2f} ms  p99 {pct(samples, .99):6.2f} ms  "
          f"(mean {statistics.mean(samples) * 1000:.2f})")


async def main(pods: int, nodes: int) -> None:
    async with SimApiServer() as api:
        with tempfile.TemporaryDirectory() as tmp:  # the client reads the file once
            kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(Path(tmp) / "kc"))
        seen = 0
        done = asyncio.Event()

        async def node_watch(node: str) -> None:
            nonlocal seen
            async for event in kube.watch_pods(api.store.rv and str(api.store.rv),
                                               field_selector=f"spec.nodeName={node}"):
                if event["type"] != "BOOKMARK":
                    seen += 1
                    if seen == pods * 2:
                        done.set()

        watchers = [asyncio.create_task(node_watch(f"n{i}")) for i in range(nodes)]
        pod = {"metadata": {"generateName": "b-"}, "spec": {"containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1",
                                                                  "nvidia.com/gpumem": "3000"}}}]}}
        created: list[dict[str, str]] = []

        async def create() -> None:
            p = await kube.create_pod("default", pod)  # type: ignore[arg-type]
            created.append(p["metadata"])  # type: ignore[arg-type]

        await run_verb("create", [create() for _ in range(pods)])
        await run_verb("bind", [kube.bind_pod("default", m["name"], m["uid"], f"n{i % nodes}", {"a": "b"})
                                for i, m in enumerate(created)])
        running = {"status": {"phase": "Running"}}
        await run_verb("status", [kube.patch_pod_status("default", m["name"], running) for m in created])
        await run_verb("list(all)", [kube.list_pods() for _ in range(20)])
        await asyncio.wait_for(done.wait(), 60)
        print(f"watch: {nodes} node watchers received {seen} events")
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await kube.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    asyncio.run(main(40, 4) if parser.parse_args().smoke else main(PODS, NODES))
