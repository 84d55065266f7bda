"""Device events: a node's full inventory (level-triggered) and health transitions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shared.events.base import Event
from shared.model import DeviceInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory(Event):
    """The complete device list of one node, sent on start, on change and as a heartbeat."""

    KIND: ClassVar[str] = "inventory.snapshot"

    devices: tuple[DeviceInfo, ...]
    heartbeat_s: float = 30.0
    """Interval of heartbeats; a consumer treats the node as stale after a few missed ones."""
    generation: int = 0
    """Increases on every content change (not on heartbeats)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceHealth(Event):
    """One device changed health (either way: devices recover)."""

    KIND: ClassVar[str] = "device.health"

    uuid: str
    healthy: bool
    reason: str = ""
