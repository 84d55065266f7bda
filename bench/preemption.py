"""Benchmark: from a high-priority pod's creation to Running when it must preempt, on the real control plane.

Starts a :class:`~gpubus_local.kube.stack.KubeStack` (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler calling gpubus's extender, a real kubelet on the fake CRI) with one node of two
A100-80GB cards. Each round fills both cards with eight pods of priority 100 and 20000 MiB (four a
card), then creates a pod of priority 1000 asking 40000 MiB: it fits nowhere for card memory, so
gpubus's scheduler evicts two pods of one card (Eviction API, their graceful termination of
``--grace`` seconds) and holds the room until the pod binds. Prints, per round, the seconds from
the create call to the pod's Running phase as the pod watch shows it, and the median.

With ``--gang``, the stack runs the v1.37 Workload API (``GenericWorkload``) and each round times a
gang instead: a PodGroup of ``gang.minCount`` 4 and its four whole-card pods on four free cards,
from the first create call to all four Running.

    .venv/bin/python bench/preemption.py              # 3 rounds, victims' grace 5 s
    .venv/bin/python bench/preemption.py --rounds 5 --grace 30
    .venv/bin/python bench/preemption.py --gang
    .venv/bin/python bench/preemption.py --smoke      # one round (CI)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from gpubus_local.kube.api import ApiError  # noqa: E402
from gpubus_local.kube.binaries import BinariesMissing, find_binaries  # noqa: E402
from gpubus_local.kube.stack import KubeStack, KubeStackSpec  # noqa: E402
from gpubus_local.sim.kube import SimKubeClient  # noqa: E402

CLASSES = {"bench-low": 100, "bench-high": 1000}


def pod(name: str, mem: int, priority_class: str, grace: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mem, "nvidia.com/gpucores": 10}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"bench": "preemption"},
                         "annotations": {"gpubus.io/sim-duration": "inf"}},
            "spec": {"terminationGracePeriodSeconds": grace,
                     **({"priorityClassName": priority_class} if priority_class else {}),
                     "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]}}


async def phase(kube: SimKubeClient, name: str) -> str | None:
    found = await kube.get_pod("default", name)
    return None if found is None else (found.get("status") or {}).get("phase")


async def wait_for(what: str, check: Any, timeout: float = 300.0) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def one_round(kube: SimKubeClient, stack: KubeStack, n: int, grace: int) -> float:
    fill = [f"fill-{n}-{i}" for i in range(8)]
    for name in fill:
        await kube.create_pod("default", pod(name, 20000, "bench-low", grace))  # type: ignore[arg-type]

    async def filled() -> bool:
        return [await phase(kube, name) for name in fill] == ["Running"] * len(fill)
    await wait_for("the fill Running", filled)
    urgent = f"urgent-{n}"
    started = time.monotonic()
    await kube.create_pod("default", pod(urgent, 40000, "bench-high", grace))  # type: ignore[arg-type]

    async def running() -> bool:
        return await phase(kube, urgent) == "Running"
    await wait_for(f"{urgent} Running", running)
    took = time.monotonic() - started
    assert stack.api is not None
    for name in [*fill, urgent]:
        try:
            await stack.api.request("DELETE", f"/api/v1/namespaces/default/pods/{name}",
                                    {"gracePeriodSeconds": 0})
        except ApiError as e:
            if e.status != 404:  # the victims are gone already
                raise

    async def gone() -> bool:
        return [await kube.get_pod("default", name) for name in [*fill, urgent]] == [None] * (len(fill) + 1)
    await wait_for("the round's pods gone", gone)
    return took


async def gang_round(kube: SimKubeClient, stack: KubeStack, n: int) -> float:
    assert stack.api is not None
    group = f"gang-{n}"
    members = [f"{group}-{i}" for i in range(4)]
    started = time.monotonic()
    await stack.api.create("/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups", {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": group, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": len(members)}}}})
    for name in members:
        member = pod(name, 81920, "", 0)  # a group's pods share its priority (0 here)
        member["spec"]["schedulingGroup"] = {"podGroupName": group}
        await kube.create_pod("default", member)  # type: ignore[arg-type]

    async def running() -> bool:
        return [await phase(kube, name) for name in members] == ["Running"] * len(members)
    await wait_for(f"{group} Running", running)
    took = time.monotonic() - started
    for name in members:
        await stack.api.request("DELETE", f"/api/v1/namespaces/default/pods/{name}",
                                {"gracePeriodSeconds": 0})

    async def gone() -> bool:
        return [await kube.get_pod("default", name) for name in members] == [None] * len(members)
    await wait_for(f"{group}'s pods gone", gone)
    return took


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gpubus-preemption-") as scratch:
        if args.gang:
            spec = KubeStackSpec(data_dir=Path(scratch), nodes=1, devices="4xA100-80GB", log_level="warning",
                                 feature_gates="GenericWorkload=true",
                                 runtime_config="scheduling.k8s.io/v1beta1=true")
        else:
            spec = KubeStackSpec(data_dir=Path(scratch), nodes=1, devices="2xA100-80GB", log_level="warning")
        async with KubeStack(spec) as stack:
            assert stack.api is not None
            for name, value in CLASSES.items():
                await stack.api.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": name}, "value": value})
            kube = await SimKubeClient.from_kubeconfig(stack.kubeconfig)
            try:
                times = []
                for n in range(args.rounds):
                    if args.gang:
                        took = await gang_round(kube, stack, n)
                        print(f"round {n + 1}: gang of 4 created -> all Running in {took:.2f}s", flush=True)
                    else:
                        took = await one_round(kube, stack, n, args.grace)
                        print(f"round {n + 1}: created -> Running in {took:.2f}s (2 victims evicted)",
                              flush=True)
                    times.append(took)
            finally:
                await kube.close()
            what = "a gang of 4" if args.gang else f"victims' terminationGracePeriodSeconds {args.grace}"
            print(f"median of {len(times)}: {statistics.median(times):.2f}s ({what})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grace", type=int, default=5, help="The victims' terminationGracePeriodSeconds.")
    parser.add_argument("--gang", action="store_true", help="Time a gang of 4 (Workload API) instead.")
    parser.add_argument("--smoke", action="store_true", help="CI's check that the script runs: 1 round.")
    options = parser.parse_args()
    if options.smoke:
        options.rounds = 1
        try:
            find_binaries(build=False)
        except BinariesMissing as e:
            print(f"smoke: skipped (0 rounds), the real control plane is not built here ({e})")
            raise SystemExit(0) from None
    asyncio.run(main(options))
