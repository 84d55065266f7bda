"""Usage events: what containers really use against what they were given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shared.events.base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSample:
    """One device as seen by one container (or the host): bytes used, limit, utilisation."""

    uuid: str
    used_bytes: int
    limit_bytes: int = 0
    """0 when unknown or unlimited."""
    utilization: float = 0.0
    """SM utilisation, 0..1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerUsage:
    namespace: str
    pod: str
    pod_uid: str
    container: str
    devices: tuple[DeviceSample, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage(Event):
    """A node's periodic usage sample: per container and per device."""

    KIND: ClassVar[str] = "usage.sample"

    containers: tuple[ContainerUsage, ...]
    host: tuple[DeviceSample, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageOverLimit(Event):
    """A container uses more memory on a device than its slice allows."""

    KIND: ClassVar[str] = "usage.over_limit"

    namespace: str
    pod: str
    pod_uid: str
    container: str
    uuid: str
    used_bytes: int
    limit_bytes: int
