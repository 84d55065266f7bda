"""The Allocate handoff rule: which per-container device counts make a kubelet call ambiguous.

The kubelet's Allocate never says which pod it is for, only how many devices a container gets, so
pods are serialized on a node only where that count makes a call ambiguous (contract item 2): at
most one pod per node and per-container device count decided and not yet allocated. The scheduler
leader keeps this over its ledger (``services/scheduler/handoff_slots.py``); until issue 32 it was a
KV lease ``alloc.<node>.<count>`` in bucket ``locks``.
"""

from __future__ import annotations

from shared.model import PodDevices


def device_counts(devices: PodDevices) -> list[int]:
    """The distinct per-container device counts of a pod's GPU containers, ascending: the handoff
    slots its bind waits for (in this order, so two pods needing several never deadlock)."""
    return sorted({len(slot) for slot in devices if slot})
