"""One event as one readable line, the way ``gpubus tap`` prints it and the dashboard's feed shows it.

Pure functions over decoded events: the key facts of each kind, which pods an event concerns, a
timestamp no clock can refuse. No NATS, no I/O, nothing about where the line goes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from shared.events import (
    AllocationApplied,
    AllocationDecided,
    AllocationFailed,
    AllocationMismatch,
    AllocationReleased,
    DeviceHealth,
    Event,
    Inventory,
    PodAdmitted,
    PodPreempted,
    PodRejected,
    PodUnschedulable,
    Usage,
    UsageOverLimit,
)

_MIB = 1 << 20


def pods_of(event: Event) -> set[tuple[str, str]]:
    """Every (namespace, name) an event concerns."""
    if isinstance(event, AllocationDecided):
        return {(event.allocation.namespace, event.allocation.name)}
    if isinstance(event, Usage):
        return {(c.namespace, c.pod) for c in event.containers}
    if isinstance(event, UsageOverLimit):
        return {(event.namespace, event.pod)}
    ns, name = getattr(event, "namespace", None), getattr(event, "name", None)
    return {(ns, name)} if isinstance(ns, str) and isinstance(name, str) else set()


def _pod(ns: str, name: str) -> str:
    return f"{ns}/{name}"


def _decided(e: AllocationDecided) -> str:
    a = e.allocation
    cards = [f"{d.uuid}:{d.usedmem}MiB/{d.usedcores}%" for slot in a.devices for d in slot]
    return f"{_pod(a.namespace, a.name)} {a.state} devices=[{' '.join(cards)}]"


def _usage(e: Usage) -> str:
    used = sum(d.used_bytes for c in e.containers for d in c.devices)
    return f"containers={len(e.containers)} used={used // _MIB}MiB"


#: kind -> key facts of that event, after time, kind and node.
_FACTS: dict[type[Event], Callable[[Any], str]] = {
    PodAdmitted: lambda e: f"{_pod(e.namespace, e.name)} gpu-containers="
                           f"{sum(r is not None for r in e.requests)} scheduler={e.scheduler_name}",
    PodRejected: lambda e: f"{_pod(e.namespace, e.name)} reason={e.reason!r}",
    PodUnschedulable: lambda e: f"{_pod(e.namespace, e.name)} "
                                + "; ".join(f"{n}: {r}" for n, r in sorted(e.reasons.items())),
    PodPreempted: lambda e: f"{_pod(e.namespace, e.name)} (priority {e.priority}) for "
                            f"{_pod(e.beneficiary_namespace, e.beneficiary_name)} "
                            f"(priority {e.beneficiary_priority}) card={e.card or '-'}",
    AllocationDecided: _decided,
    AllocationReleased: lambda e: f"{_pod(e.namespace, e.name)} why={e.why}",
    AllocationApplied: lambda e: f"{_pod(e.namespace, e.name)} container={e.container} "
                                 f"devices={','.join(e.device_ids)} complete={e.complete}",
    AllocationFailed: lambda e: f"{_pod(e.namespace, e.name)} reason={e.reason!r}",
    AllocationMismatch: lambda e: f"{_pod(e.namespace, e.name)} container={e.container} "
                                  f"expected={','.join(e.expected)} actual={','.join(e.actual)}",
    Inventory: lambda e: f"devices={len(e.devices)} healthy={sum(d.health for d in e.devices)} "
                         f"generation={e.generation}",
    DeviceHealth: lambda e: f"{e.uuid} {'healthy' if e.healthy else 'UNHEALTHY'}"
                            + (f" reason={e.reason!r}" if e.reason else ""),
    Usage: _usage,
    UsageOverLimit: lambda e: f"{_pod(e.namespace, e.pod)} container={e.container} {e.uuid} "
                              f"used={e.used_bytes // _MIB}MiB limit={e.limit_bytes // _MIB}MiB",
}


def format_ts(ts: float) -> str:
    """``HH:MM:SS.mmm`` local time, or ``ts=<raw value>`` for one no clock can show (NaN, inf, 1e300):
    the line matters more than its time."""
    try:
        return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"
    except (ValueError, OverflowError, OSError):
        return f"ts={ts!r}"


def render_line(event: Event) -> str:
    """``12:00:01.123 allocation.decided node-1 ns/pod ... facts``."""
    facts = _FACTS.get(type(event), lambda e: "")(event)
    return f"{format_ts(event.ts)} {event.KIND:<20} {event.node or '-':<12} {facts}".rstrip()
