"""The scheduler <-> node-agent handoff rules that both sides must compute identically.

The kubelet's Allocate never says which pod it is for, only how many devices a container gets, so
pods are serialized on a node only where that count makes a call ambiguous (contract item 2): one
lease per node and per-container device count, in KV bucket ``locks``.
"""

from __future__ import annotations

from shared.model import PodDevices


def lease_key(node: str, size: int) -> str:
    """The ambiguity lease for ``size``-device containers on ``node``."""
    return f"alloc.{node}.{size}"



def device_counts(devices: PodDevices) -> list[int]:
    """The distinct per-container device counts of a pod's GPU containers, ascending: the sizes of
    the leases its bind takes (in this order, so two pods needing several never deadlock) and its
    node-agent releases."""
    return sorted({len(slot) for slot in devices if slot})
