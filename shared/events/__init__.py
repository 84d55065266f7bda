"""The event catalogue: every decision gpubus makes is one of these, published on NATS.

Subjects are ``gpubus.<family>.<verb>.<node>`` (``_`` when no node applies), so
``gpubus.*.*.node-7`` taps one node. Bodies are msgpack (see :mod:`shared.codec`).
"""

from shared.events.admission import PodAdmitted, PodRejected
from shared.events.base import NO_NODE, SUBJECT_ROOT, Event, node_token, subject_for
from shared.events.devices import DeviceHealth, Inventory
from shared.events.scheduling import (
    AllocationApplied,
    AllocationDecided,
    AllocationFailed,
    AllocationMismatch,
    AllocationReleased,
    PodPreempted,
    PodUnschedulable,
)
from shared.events.usage import ContainerUsage, DeviceSample, Usage, UsageOverLimit

#: kind -> class, for decoding. Every concrete event must be listed here.
CATALOGUE: dict[str, type[Event]] = {
    cls.KIND: cls
    for cls in (
        PodAdmitted,
        PodRejected,
        PodUnschedulable,
        PodPreempted,
        AllocationDecided,
        AllocationReleased,
        AllocationApplied,
        AllocationFailed,
        AllocationMismatch,
        Inventory,
        DeviceHealth,
        Usage,
        UsageOverLimit,
    )
}

__all__ = [
    "CATALOGUE",
    "NO_NODE",
    "SUBJECT_ROOT",
    "AllocationApplied",
    "AllocationDecided",
    "AllocationFailed",
    "AllocationMismatch",
    "AllocationReleased",
    "ContainerUsage",
    "DeviceHealth",
    "DeviceSample",
    "Event",
    "Inventory",
    "PodAdmitted",
    "PodPreempted",
    "PodRejected",
    "PodUnschedulable",
    "Usage",
    "UsageOverLimit",
    "node_token",
    "subject_for",
]
