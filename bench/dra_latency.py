"""Pod create -> Running on the real Kubernetes control plane: DRA mode against extender mode.

For each mode, one :class:`~gpubus_local.kube.stack.KubeStack` (the real API server,
kube-scheduler and kubelets on the fake runtime; ``scripts/kube-build``), then ``--pods`` pods
created open-loop at ``--rate`` pods/s, each asking for 1 GiB and 10 % of one card: in extender
mode as ``nvidia.com/gpu``/``gpumem``/``gpucores`` limits (webhook, extender, device plugin), in
DRA mode as a claim from a ResourceClaimTemplate (kube-scheduler's DRA plugin, the node-agent's
DRA kubelet plugin), and in ``dra-limits`` mode (a DRA stack) as the same HAMi limits as extender
mode, which the webhook turns into a claim of a template it makes. Running is seen by polling the
pod list every 50 ms.

    .venv/bin/python bench/dra_latency.py --nodes 2 --pods 60 --rate 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from gpubus_local.kube.binaries import BinariesMissing, find_binaries
from gpubus_local.kube.stack import KubeStack, KubeStackSpec

Json = dict[str, Any]
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "bench-1g", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpubus.io",
                "capacity": {"requests": {"memory": "1Gi", "cores": "10"}}}}]}}}}


def stack_mode(mode: str) -> str:
    """The chart's mode a bench mode runs on (``dra-limits``: DRA, pods written for HAMi)."""
    return "dra" if mode.startswith("dra") else "extender"


def pod(mode: str, name: str) -> Json:
    container: Json = {"name": "main", "image": "cuda:12.4"}
    spec: Json = {"containers": [container]}
    if mode == "dra":
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "bench-1g"}]
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024",
                                             "nvidia.com/gpucores": "10"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


async def run(mode: str, nodes: int, pods: int, rate: float, keep: bool) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix=f"bench-{mode}-")
    print(mode, "data dir", tmp, flush=True)
    try:
        async with KubeStack(KubeStackSpec(data_dir=Path(tmp), nodes=nodes, devices="4xA100-80GB",
                                           mode=stack_mode(mode), log_level="warning")) as stack:
            api = stack.api
            assert api is not None
            if mode == "dra":
                await api.create("/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates",
                                 TEMPLATE)
            created: dict[str, float] = {}
            running: dict[str, float] = {}
            names = [f"bench-{i}" for i in range(pods)]

            async def create(i: int, name: str, start: float) -> None:
                await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
                created[name] = time.monotonic()
                await api.create("/api/v1/namespaces/default/pods", pod(mode, name))

            async def watch() -> None:
                while len(running) < pods:
                    found = await api.get("/api/v1/namespaces/default/pods") or {}
                    now = time.monotonic()
                    for p in found.get("items", []):
                        if p.get("status", {}).get("phase") == "Running":
                            running.setdefault(p["metadata"]["name"], now)
                    await asyncio.sleep(0.05)

            start = time.monotonic()
            watcher = asyncio.create_task(watch())
            await asyncio.gather(*(create(i, n, start) for i, n in enumerate(names)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher, 300)
            latencies = sorted(running[n] - created[n] for n in names if n in running)
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if not latencies:
        return {"started": 0}
    return {"started": len(latencies), "p50_ms": 1000 * statistics.median(latencies),
            "p95_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))], "max_ms": 1000 * latencies[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--pods", type=int, default=60)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--modes", default="extender,dra,dra-limits")
    parser.add_argument("--keep", action="store_true", help="keep each stack's data dir (logs)")
    parser.add_argument("--smoke", action="store_true",
                        help="CI's check that the script runs: 1 node, 3 pods at 2/s in each mode.")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.pods, args.rate = 1, 3, 2.0
        try:
            find_binaries(build=False)
        except BinariesMissing as e:
            print(f"smoke: skipped, the real control plane is not built here ({e})")
            return
    for mode in args.modes.split(","):
        result = asyncio.run(run(mode, args.nodes, args.pods, args.rate, args.keep))
        # the machine's load after the run: the figures are only comparable at similar loads
        print(mode, {k: round(v, 1) for k, v in result.items()}, f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
