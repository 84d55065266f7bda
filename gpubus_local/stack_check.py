"""Replaying the event stream to prove no GPU was ever over-committed (e2e tests and bench/e2e.py).

Input: events as ``gpubus tap --json`` prints them (plain dicts with ``kind``), in stream order.
Inventory snapshots set each device's slots, MiB and cores; ``allocation.decided`` adds a pod's
slices (a repeated decision for the same pod replaces it); ``allocation.released`` and
``allocation.failed`` take them away. MIG instances on one card must not share a memory slice.
Pure; knows no service.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class _Device:
    count: int
    devmem: int
    devcore: int
    used: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """pod uid -> (slots, MiB, cores) on this device."""

    def totals(self) -> tuple[int, int, int]:
        slots = sum(u[0] for u in self.used.values())
        return slots, sum(u[1] for u in self.used.values()), sum(u[2] for u in self.used.values())


def _mig_overlap(held: dict[str, list[tuple[int, int]]], uid: str, cd: dict[str, Any], pod: str) -> list[str]:
    """A MIG instance whose memory slices overlap another live one on the card (then record it)."""
    start, size = cd["mig"]["placement"]["start"], cd["mig"]["placement"]["size"]
    clash = [(s, n) for slices in held.values() for s, n in slices if s < start + size and start < s + n]
    held.setdefault(uid, []).append((start, size))
    if not clash:
        return []
    return [f"MIG overlap on {cd['uuid']} after {pod}: slices {start}+{size} over {clash}"]


def replay_overcommit(events: list[dict[str, Any]]) -> list[str]:
    """Invariant 1 over the event stream in stream order."""
    devices: dict[str, _Device] = {}
    holds: dict[str, set[str]] = defaultdict(set)  # pod uid -> devices it holds
    problems: list[str] = []

    placed: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(dict)  # device -> pod -> MIG slices

    def drop(uid: str) -> None:
        for dev in holds.pop(uid, set()):
            devices[dev].used.pop(uid, None)
            placed[dev].pop(uid, None)

    for e in events:
        kind = e.get("kind")
        if kind == "inventory.snapshot":
            for d in e["devices"]:
                old = devices.get(d["id"])
                devices[d["id"]] = _Device(count=d["count"], devmem=d["devmem"], devcore=d["devcore"],
                                           used=old.used if old else {})
        elif kind == "allocation.decided":
            a = e["allocation"]
            uid = a["pod_uid"]
            drop(uid)  # a re-published decision replaces, never adds
            per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
            for slot in a["devices"]:
                for cd in slot:
                    acc = per[cd["uuid"]]
                    acc[0] += 1
                    acc[1] += cd["usedmem"]
                    acc[2] += cd["usedcores"]
                    if cd.get("mig"):
                        problems += _mig_overlap(placed[cd["uuid"]], uid, cd, f"{a['namespace']}/{a['name']}")
            for dev, (n, mem, cores) in per.items():
                if dev not in devices:
                    problems.append(f"{a['namespace']}/{a['name']} decided on {dev}, unknown to inventory")
                    continue
                devices[dev].used[uid] = (n, mem, cores)
                holds[uid].add(dev)
                slots, used_mem, used_cores = devices[dev].totals()
                d = devices[dev]
                if slots > d.count or used_mem > d.devmem or used_cores > d.devcore:
                    problems.append(f"over-commit on {dev} after {a['namespace']}/{a['name']}: "
                                    f"{slots}/{d.count} slots, {used_mem}/{d.devmem} MiB, "
                                    f"{used_cores}/{d.devcore} cores")
        elif kind in ("allocation.released", "allocation.failed") and e.get("pod_uid"):
            drop(e["pod_uid"])
    return problems
