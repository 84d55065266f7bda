"""The scheduler <-> node-agent handoff rules that both sides must compute identically.

The kubelet's Allocate never says which pod it is for, only how many devices a container gets, so
pods are serialized on a node only where that count makes a call ambiguous (contract item 2): one
lease per node and per-container device count, in KV bucket ``locks``.
"""

from __future__ import annotations


def lease_key(node: str, size: int) -> str:
    """The ambiguity lease for ``size``-device containers on ``node``."""
    return f"alloc.{node}.{size}"

