"""Benchmark: one monitor collection cycle for 100 containers on 8 GPUs (goal <= 20 ms).

HAMi-core shared-region files (v1 layout, 1-3 live processes each, one or two devices) are
written to a temp hook directory; the ledger holds every pod. A cycle lists the directories,
decodes every region, joins with the ledger, checks limits and builds the usage events.
Prints the cold first cycle and p50/p99 of warm cycles (every cycle reads every file afresh).

    .venv/bin/python bench/monitor.py [--containers 100] [--gpus 8] [--cycles 300] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.monitor.monitor import Monitor, MonitorOptions
from services.monitor.region_writer import Proc, RegionDevice, RegionImage, SlotDevice, build_region
from services.monitor.sources.hamicore import HamiCoreSource
from shared.events import Event
from shared.model import Allocation, ContainerDevice, DeviceUUID, NodeName, PodUID

MIB = 1 << 20


def populate(hook: Path, containers: int, gpus: int) -> list[Allocation]:
    uuids = [f"GPU-{uuid.UUID(int=i + 1)}" for i in range(gpus)]
    allocations = []
    for n in range(containers):
        devs = [uuids[n % gpus]] + ([uuids[(n + 1) % gpus]] if n % 5 == 0 else [])
        uid = str(uuid.UUID(int=10_000 + n))
        allocations.append(
            Allocation(
                pod_uid=PodUID(uid),
                namespace="bench",
                name=f"pod-{n}",
                node=NodeName("bench-node"),
                containers=("main",),
                devices=(
                    tuple(
                        ContainerDevice(uuid=DeviceUUID(u), usedmem=4000, usedcores=10, idx=i)
                        for i, u in enumerate(devs)
                    ),
                ),
            )
        )
        procs = tuple(
            Proc(
                pid=p + 1,
                devices=tuple(
                    SlotDevice(total=(200 + 5 * n) * MIB, context=100 * MIB, sm_util=5) for _ in devs
                ),
            )
            for p in range(1 + n % 3)
        )
        image = RegionImage(
            version=1,
            devices=tuple(RegionDevice(uuid=u, limit_bytes=4000 * MIB) for u in devs),
            procs=procs,
            last_kernel_time=int(time.time()),
        )
        d = hook / "containers" / f"{uid}_main"
        d.mkdir(parents=True)
        (d / f"{uuid.uuid4().hex[:8]}.cache").write_bytes(build_region(image))
    return allocations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--smoke", action="store_true", help="5 containers, 2 GPUs, 3 cycles")
    args = parser.parse_args()
    if args.smoke:
        args.containers, args.gpus, args.cycles = 5, 2, 3
    events: list[Event] = []
    with tempfile.TemporaryDirectory(prefix="gpubus-bench-monitor-") as tmp:
        hook = Path(tmp)
        allocations = populate(hook, args.containers, args.gpus)
        monitor = Monitor(
            "bench-node", [HamiCoreSource(hook)], events.append, MonitorOptions(publish_interval_s=0.0)
        )
        monitor.ledger.replace_all(allocations)
        start = time.perf_counter()
        view = monitor.cycle()
        cold_ms = (time.perf_counter() - start) * 1e3
        assert len(view.containers) == args.containers, len(view.containers)
        samples = []
        for _ in range(args.cycles):
            start = time.perf_counter()
            monitor.cycle()
            samples.append((time.perf_counter() - start) * 1e3)
        monitor.close()
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(
        f"monitor cycle: {args.containers} containers on {args.gpus} GPUs (hami-core v1 regions), "
        f"{args.cycles} warm cycles"
    )
    print(f"  cold (first cycle): {cold_ms:.2f} ms")
    print(f"  warm p50: {p50:.2f} ms   p99: {p99:.2f} ms   max: {samples[-1]:.2f} ms   goal: <= 20 ms")
    print(f"  usage events built: {len(events)}")


if __name__ == "__main__":
    main()
