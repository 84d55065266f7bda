"""GPU discovery port: the ``DeviceSource`` Protocol, the values it yields and the health policy.

A source (NVML or simulated) reports the node's physical GPUs once and then a stream of health
transitions. The XID health policy and the recovery tracker are pure here so they can be tested
without a GPU; the NVML adapter only feeds them. Nothing here knows gRPC, NATS or the kubelet.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from shared.model import DeviceUUID

#: XIDs HAMi (and the NVIDIA plugin) treat as application errors, not device faults.
HAMI_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True, slots=True, kw_only=True)
class PhysicalDevice:
    """One GPU as discovered: identity, model, memory and where it sits."""

    uuid: DeviceUUID
    index: int
    name: str
    """Model name as NVML reports it, e.g. ``NVIDIA A100-SXM4-80GB``."""
    memory_mib: int
    numa: int = 0
    mig_enabled: bool = False
    healthy: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthChange:
    """A device turned unhealthy or healthy again, and why."""

    uuid: DeviceUUID
    healthy: bool
    reason: str = ""


class DeviceSource(Protocol):
    """Where GPUs come from. ``devices`` is called once at start; ``health_changes`` runs until closed."""

    def devices(self) -> tuple[PhysicalDevice, ...]: ...

    def health_changes(self) -> AsyncIterator[HealthChange]: ...

    async def close(self) -> None: ...


@runtime_checkable
class HealthInjector(Protocol):
    """A source whose health can be set from outside (the simulator, tests, demos)."""

    def inject(self, change: HealthChange) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthPolicy:
    """Which XIDs mark a device unhealthy, from DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS."""

    enabled: bool = True
    ignored: frozenset[int] = HAMI_IGNORED_XIDS

    @classmethod
    def parse(cls, disable: str, enable: str) -> HealthPolicy:
        """``disable``: ``all``/``xids`` switch XID checks off, numbers are ignored too; ``enable`` wins."""
        words = {w.strip().lower() for w in disable.split(",") if w.strip()}
        if words & {"all", "xids"}:
            return cls(enabled=False)
        ignored = set(HAMI_IGNORED_XIDS) | {int(w) for w in words if w.isdigit()}
        enable_words = {w.strip().lower() for w in enable.split(",") if w.strip()}
        if "all" in enable_words:
            ignored.clear()
        ignored -= {int(w) for w in enable_words if w.isdigit()}
        return cls(ignored=frozenset(ignored))

    def is_critical(self, xid: int) -> bool:
        return self.enabled and xid not in self.ignored


@dataclass(slots=True)
class HealthTracker:
    """Per-device health with recovery: unhealthy on a critical XID, healthy after a quiet period.

    Time is passed in (monotonic seconds) so the policy is testable without clocks.
    """

    policy: HealthPolicy
    recovery_s: float
    _unhealthy_since: dict[DeviceUUID, float] = field(default_factory=dict)

    def on_xid(self, uuid: DeviceUUID, xid: int, now: float) -> HealthChange | None:
        if not self.policy.is_critical(xid):
            return None
        was_healthy = uuid not in self._unhealthy_since
        self._unhealthy_since[uuid] = now
        return HealthChange(uuid=uuid, healthy=False, reason=f"XID {xid}") if was_healthy else None

    def on_lost(self, uuid: DeviceUUID, now: float, reason: str) -> HealthChange | None:
        """The device stopped answering NVML (e.g. GPU is lost)."""
        was_healthy = uuid not in self._unhealthy_since
        self._unhealthy_since[uuid] = now
        return HealthChange(uuid=uuid, healthy=False, reason=reason) if was_healthy else None

    def on_probe_ok(self, uuid: DeviceUUID, now: float) -> HealthChange | None:
        """The device answered NVML; it recovers once ``recovery_s`` passed without a critical event."""
        since = self._unhealthy_since.get(uuid)
        if since is None or now - since < self.recovery_s:
            return None
        del self._unhealthy_since[uuid]
        return HealthChange(uuid=uuid, healthy=True, reason=f"no critical event for {self.recovery_s:g}s")

    def unhealthy(self) -> frozenset[DeviceUUID]:
        return frozenset(self._unhealthy_since)
