"""Filter+score latency per pod, in process.

Issue 2 goal on 2 cores: 1000 nodes p50 <= 1 ms, p99 <= 2 ms; 5000 nodes p99 <= 8 ms.

Cluster: N nodes x 8 GPUs (80 GiB, split 10), about half full (random per-device usage).
Pods: 60 % 1 x (8 GiB,
20 %), 30 % 2 x (16 GiB, 30 %), 10 % 4 x whole GPU (exclusive). After each pod the chosen node gets the pod's
usage (a new NodeState), as the scheduler's ledger would do, so per-node memos stay valid except there.

Three figures per size:
  warm     filter_nodes + best node's devices, in steady state (the scheduler's real path)
  +reasons the same plus every failed node's exact HAMi reason string (what /filter returns as FailedNodes)
  cold     fresh NodeState objects for every pod (no memo at all): the worst case

Run: .venv/bin/python bench/fit.py [--pods 2000] [--seed 1] [--smoke]  (--smoke: 50 nodes, 20 pods)
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from services.scheduler.fit import NodeState, filter_nodes
from shared.model import (
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    NodeName,
    PodRequest,
    PodUID,
)

MEM = 81920


def make_cluster(n: int, rng: random.Random) -> list[NodeState]:
    nodes = []
    for k in range(n):
        devices = tuple(
            DeviceInfo(
                id=DeviceUUID(f"GPU-{k}-{i}"), index=i, type="NVIDIA-A100-SXM4-80GB", devmem=MEM, numa=i // 4
            )
            for i in range(8)
        )
        usage = []
        for _ in range(8):
            slots = rng.randint(0, 6)
            if slots == 0:
                usage.append(DeviceUsage())
                continue
            usage.append(
                DeviceUsage(
                    used=slots,
                    usedmem=rng.randint(slots * 4096, MEM * 3 // 4),
                    usedcores=rng.randint(slots * 5, 80),
                )
            )
        nodes.append(NodeState(name=NodeName(f"node-{k:05d}"), devices=devices, usage=tuple(usage)))
    return nodes


def make_pod(i: int, rng: random.Random) -> PodRequest:
    x = rng.random()
    if x < 0.6:
        req = ContainerRequest(nums=1, memreq=8192, coresreq=20)
    elif x < 0.9:
        req = ContainerRequest(nums=2, memreq=16384, coresreq=30)
    else:
        req = ContainerRequest(nums=4, mempercentagereq=100, coresreq=100)
    return PodRequest(
        namespace="bench",
        name=f"pod-{i}",
        uid=PodUID(f"uid-{i}"),
        containers=(ContainerSpec(name="main", request=req),),
    )


def percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100)
    return q[49] * 1e3, q[98] * 1e3


def run(n_nodes: int, pods: int, seed: int, mode: str) -> tuple[float, float, float]:
    rng = random.Random(seed)
    nodes = make_cluster(n_nodes, rng)
    index = {n.name: i for i, n in enumerate(nodes)}
    gc.collect()
    gc.freeze()  # long-lived state out of the collector's way, as the scheduler does after loading
    samples: list[float] = []
    fitted = 0
    for i in range(pods):
        pod = make_pod(i, rng)
        if mode == "cold":
            nodes = [NodeState(name=n.name, devices=n.devices, usage=n.usage) for n in nodes]
            gc.freeze()
        t0 = time.perf_counter()
        result = filter_nodes(nodes, pod)
        if mode == "+reasons":
            _ = result.failed
        samples.append(time.perf_counter() - t0)
        if result.best is not None:
            fitted += 1
            k = index[result.best.node]
            placed = nodes[k].with_pod(result.best.devices)
            # keep the cluster about half full: release the usage again on every second placement
            nodes[k] = placed if i % 2 else nodes[k]
    gc.unfreeze()
    p50, p99 = percentiles(samples)
    return p50, p99, fitted / pods


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    sizes, least_cold = ((50,), 10) if args.smoke else ((1000, 5000), 100)
    pods_per_run = 20 if args.smoke else args.pods
    for n in sizes:
        for mode in ("warm", "+reasons", "cold"):
            pods = pods_per_run if mode != "cold" else max(pods_per_run // 10, least_cold)
            p50, p99, fit = run(n, pods, args.seed, mode)
            print(
                f"{n:5d} nodes x 8 GPUs  {mode:9s} pods={pods:5d}  p50 {p50:7.3f} ms  p99 {p99:7.3f} ms"
                f"  (placed {fit:.0%})"
            )


if __name__ == "__main__":
    main()
