"""Benchmark: pods/s through the kube-scheduler stand-in (filter -> prioritize -> bind) on 100 nodes.

Everything in ONE process and event loop (SimApiServer, a minimal extender that POSTs the Binding,
the SimScheduler, the pod creator), so the figure is a floor for the simulator's own overhead.
Prints sustained pods/s and p50/p99 create->bound latency (observed through a pod watch).
Run: ``.venv/bin/python bench/sim_scheduler.py [pods] [nodes] [--smoke]`` (``--smoke``: 20 pods, 4 nodes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.extender_client import ExtenderConfig
from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.scheduler import SchedulerSettings, SimScheduler


def extender_app(kube: SimKubeClient, nodes: int) -> web.Application:
    free = {f"n{i}": 10_000 for i in range(nodes)}

    async def filter_(request: web.Request) -> web.Response:
        args = orjson.loads(await request.read())
        reply = {"NodeNames": args["NodeNames"], "FailedNodes": {}, "Error": ""}
        return web.Response(body=orjson.dumps(reply), content_type="application/json")

    async def prioritize(request: web.Request) -> web.Response:
        args = orjson.loads(await request.read())
        scores = [{"Host": n, "Score": free[n] % 11} for n in args["NodeNames"]]
        return web.Response(body=orjson.dumps(scores), content_type="application/json")

    async def bind(request: web.Request) -> web.Response:
        args: dict[str, Any] = orjson.loads(await request.read())
        free[args["Node"]] -= 1
        await kube.bind_pod(args["PodNamespace"], args["PodName"], args["PodUID"], args["Node"], {"a": "b"})
        return web.Response(body=b'{"Error":""}', content_type="application/json")

    app = web.Application()
    app.router.add_post("/filter", filter_)
    app.router.add_post("/prioritize", prioritize)
    app.router.add_post("/bind", bind)
    return app


def pct(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))] * 1000


async def main(pods: int, nodes: int) -> None:
    async with SimApiServer() as api:
        with tempfile.TemporaryDirectory() as tmp:  # the client reads the file once
            kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(Path(tmp) / "kc"))
        for i in range(nodes):
            await kube.create_node({"metadata": {"name": f"n{i}"}})
            await kube.patch_node_status(f"n{i}", {"status": {"allocatable": {"nvidia.com/gpu": "10000"}}})
        runner = web.AppRunner(extender_app(kube, nodes), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        config = ExtenderConfig(url_prefix=f"http://127.0.0.1:{runner.addresses[0][1]}")
        scheduler = SimScheduler(kube, [config], SchedulerSettings())
        scheduler.start()
        await scheduler.synced.wait()
        created: dict[str, float] = {}
        latencies: list[float] = []
        done = asyncio.Event()

        async def observe() -> None:
            async for event in kube.watch_pods(str(api.store.rv), field_selector="spec.nodeName!="):
                name = event["object"]["metadata"].get("name", "")
                if name in created:  # ADDED: it just entered the nodeName!= selector
                    latencies.append(time.perf_counter() - created.pop(name))
                    if len(latencies) == pods:
                        done.set()

        watcher = asyncio.create_task(observe())
        pod = {"metadata": {}, "spec": {"schedulerName": "gpubus-scheduler", "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        start = time.perf_counter()
        sem = asyncio.Semaphore(16)

        async def create(i: int) -> None:
            async with sem:
                created[f"p{i}"] = time.perf_counter()
                await kube.create_pod("default", {**pod, "metadata": {"name": f"p{i}"}})  # type: ignore[typeddict-item]

        await asyncio.gather(*(create(i) for i in range(pods)))
        await asyncio.wait_for(done.wait(), 120)
        wall = time.perf_counter() - start
        print(f"scheduled {pods} pods on {nodes} nodes in {wall:.2f}s: {pods / wall:.0f} pods/s "
              f"(closed loop, 16 creators); create->bound p50 {pct(latencies, .5):.1f} ms "
              f"p99 {pct(latencies, .99):.1f} ms; attempts {scheduler.stats.attempts}")
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await scheduler.stop()
        await runner.cleanup()
        await kube.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pods", nargs="?", type=int, default=2000)
    parser.add_argument("nodes", nargs="?", type=int, default=100)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(20, 4) if args.smoke else main(args.pods, args.nodes))
