"""DRA names every gpubus part agrees on: the driver, how a GPU is named in a ResourceSlice, the
capacities a claim consumes, and reading one claim's results. Pure; no I/O.

The node-agent publishes the slices and prepares claims; the scheduler follows allocated claims
to publish ``allocation.decided``; ``gpubus explain`` reads both. They must name things alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DRIVER = "gpubus.io"
"""The driver name: DeviceClass selector, ResourceSlice driver, kubelet plugin name."""
MEMORY = "memory"
"""Consumable capacity: bytes of the card's memory."""
CORES = "cores"
"""Consumable capacity: percent of the card's SMs (0-100)."""
MIB = 1 << 20
_DEVICE = re.compile(r"gpu-(\d{1,4})")


def device_name(index: int) -> str:
    """A GPU's DRA device name: ``gpu-<index>`` (a DNS label, stable across restarts)."""
    return f"gpu-{index}"


def device_index(name: str) -> int | None:
    """The card index of a device name gpubus published; None for any other name."""
    found = _DEVICE.fullmatch(name)
    return int(found.group(1)) if found else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """One device of a claim's allocation: where, which request, and what it consumes (None: not
    said, a device not shared)."""

    request: str
    pool: str
    device: str
    memory: str | None
    cores: str | None


def results(claim: Mapping[str, Any], driver: str = DRIVER) -> tuple[Result, ...]:
    """The allocated devices of ``driver`` in ``claim`` (empty when it is not allocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    out = []
    for r in (allocation.get("devices") or {}).get("results") or []:
        if r.get("driver") != driver:
            continue
        consumed = r.get("consumedCapacity") or {}
        out.append(Result(request=str(r.get("request", "")), pool=str(r.get("pool", "")),
                          device=str(r.get("device", "")), memory=consumed.get(MEMORY),
                          cores=consumed.get(CORES)))
    return tuple(out)
