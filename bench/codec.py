"""Event codec throughput for ~1 KB events: encode and decode ops/s and µs/op (p50/p99 per batch).

Run: ``.venv/bin/python bench/codec.py [--smoke]`` (``--smoke``: 2 batches). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.codec import decode, encode
from shared.events import AllocationDecided, Event, Inventory
from shared.model import Allocation, ContainerDevice, DeviceInfo, DeviceUUID, NodeName, PodUID

BATCH = 1000
ROUNDS = 60


def inventory() -> Inventory:
    devices = tuple(DeviceInfo(id=DeviceUUID(f"GPU-{i:02d}-0b6d3f1e-8c2a-4e61-9d57-{i:012d}"), index=i,
                               type="NVIDIA-A100-SXM4-80GB", devmem=81920, numa=i // 4) for i in range(8))
    return Inventory(devices=devices, node="gpu-node-0001", source="node-agent/gpu-node-0001", generation=7)


def decided() -> AllocationDecided:
    def card(i: int) -> ContainerDevice:
        return ContainerDevice(uuid=DeviceUUID(f"GPU-{i:02d}-0b6d3f1e-8c2a-4e61-9d57-{i:012d}"),
                               usedmem=3000, usedcores=30, idx=i)
    alloc = Allocation(pod_uid=PodUID("5d7f0a4c-9a57-4f7e-8f0b-6b1f1f3a2c11"), namespace="team-a",
                       name="trainer-7f9c", node=NodeName("gpu-node-0001"),
                       devices=((), (card(0), card(1)), (card(2),), (card(3), card(4))),
                       containers=("init-data", "trainer", "sidecar", "evaluator"), init_count=1)
    return AllocationDecided(allocation=alloc, node="gpu-node-0001", source="scheduler/gpubus-scheduler-0")


def measure(fn: Callable[[], object], rounds: int) -> list[float]:
    """µs per op for each batch of BATCH calls."""
    per_op = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(BATCH):
            fn()
        per_op.append((time.perf_counter() - t) / BATCH * 1e6)
    return per_op


def report(name: str, event: Event, rounds: int) -> None:
    data = encode(event)
    for op, fn in (("encode", lambda: encode(event)), ("decode", lambda: decode(data))):
        us = sorted(measure(fn, rounds))
        p50 = statistics.median(us)
        p99 = us[min(len(us) - 1, int(len(us) * 0.99))]
        print(f"{name:<20} {len(data):>5} B  {op}: {1e6 / p50:>9,.0f} ops/s  p50 {p50:6.2f} µs/op  "
              f"p99 {p99:6.2f} µs/op")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    rounds = 2 if parser.parse_args().smoke else ROUNDS
    sample = inventory()
    assert decode(encode(sample)) == sample
    report("inventory(8 gpus)", inventory(), rounds)
    report("allocation.decided", decided(), rounds)


if __name__ == "__main__":
    main()
