"""GPU discovery port: the ``DeviceSource`` Protocol, the values it yields and the health policy.

A source (NVML or simulated) reports the node's physical GPUs once and then a stream of health
transitions. The XID health policy and the recovery tracker are pure here so they can be tested
without a GPU; the NVML adapter only feeds them. Nothing here knows gRPC, NATS or the kubelet.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from shared.model import DeviceUUID, MigPlacement

#: XIDs HAMi (and the NVIDIA plugin) treat as application errors, not device faults.
HAMI_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True, slots=True, kw_only=True)
class GiProfileInfo:
    """One GPU instance profile as NVML describes it for a card (``nvmlGpuInstanceProfileInfo_t``
    plus ``nvmlDeviceGetGpuInstancePossiblePlacements``)."""

    slices: str
    """The profile's slice key, ``1g`` .. ``8g`` (NVML ``GPU_INSTANCE_PROFILE_<N>_SLICE``)."""
    memory_mb: int
    multiprocessors: int
    slice_count: int
    instance_count: int
    placements: tuple[MigPlacement, ...]


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
    mig_capabilities: tuple[GiProfileInfo, ...] = ()
    """What NVML says the card's MIG mode can hold; empty for a card without MIG."""
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


#: Key of the "every XID" switch in a policy's table (XID 0 does not exist; NVIDIA uses it the same way).
ALL_XIDS = 0


def _xid_words(value: str) -> tuple[dict[int, bool], tuple[str, ...]]:
    """``"all"``/``"xids"`` -> {ALL_XIDS: True}; else each decimal XID -> True; plus the malformed words."""
    table: dict[int, bool] = {}
    malformed: list[str] = []
    for raw in value.lower().split(","):
        word = raw.strip()
        if word in ("all", "xids"):
            return {ALL_XIDS: True}, ()
        if not word:
            continue
        if word.isascii() and word.isdigit() and int(word) < 2**64:
            table[int(word)] = True
        else:
            malformed.append(word[:32])
    return table, tuple(malformed)


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthPolicy:
    """Which XIDs mark a device unhealthy: ``DP_DISABLE_HEALTHCHECKS``/``DP_ENABLE_HEALTHCHECKS``.

    Exactly the NVIDIA device plugin's rule (``internal/rm/health.go``): ``disabled`` maps an XID
    to True (ignored) or False (watched); :data:`ALL_XIDS` stands for every XID not listed.
    """

    disabled: Mapping[int, bool] = field(default_factory=lambda: dict.fromkeys(HAMI_IGNORED_XIDS, True))
    malformed: tuple[str, ...] = ()
    """Words of either variable that are neither ``all``/``xids`` nor an XID (ignored, as NVIDIA does)."""

    @classmethod
    def parse(cls, disable: str, enable: str) -> HealthPolicy:
        """``disable``: ``all``/``xids`` or XIDs ignored besides HAMi's; ``enable``: ``all`` or XIDs watched.

        An enabled XID wins over a disabled or default-ignored one; ``enable=all`` watches every
        XID, even HAMi's application errors. ``disable=all`` with an enable *list* stays off, as in
        NVIDIA's plugin (its ``IsAllDisabled`` only looks at the ``all`` switch).
        """
        disabled, bad_disable = _xid_words(disable)
        enabled, bad_enable = _xid_words(enable)
        disabled.update(dict.fromkeys(HAMI_IGNORED_XIDS, True))
        disabled.update(dict.fromkeys(enabled, False))
        return cls(disabled=disabled, malformed=bad_disable + bad_enable)

    @property
    def enabled(self) -> bool:
        """False when XID health checks are switched off entirely."""
        return not self.disabled.get(ALL_XIDS, False)

    def is_critical(self, xid: int) -> bool:
        if self.disabled.get(ALL_XIDS) is False:
            return True
        return not self.disabled.get(xid, not self.enabled)


@dataclass(slots=True)
class HealthTracker:
    """Per-device health with recovery: unhealthy on a critical XID, healthy after a quiet period.

    Time is passed in (monotonic seconds) so the policy is testable without clocks.
    """

    policy: HealthPolicy
    recovery_s: float
    _unhealthy_since: dict[DeviceUUID, float] = field(default_factory=dict)
    _unwatched: set[DeviceUUID] = field(default_factory=set)

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

    def on_unwatchable(self, uuid: DeviceUUID, now: float, reason: str) -> HealthChange | None:
        """XID events of the device cannot be watched: unhealthy for good, as NVIDIA's plugin has it."""
        self._unwatched.add(uuid)
        return self.on_lost(uuid, now, reason)

    def on_probe_ok(self, uuid: DeviceUUID, now: float) -> HealthChange | None:
        """The device answered NVML; it recovers once ``recovery_s`` passed without a critical event."""
        since = self._unhealthy_since.get(uuid)
        if since is None or uuid in self._unwatched or now - since < self.recovery_s:
            return None
        del self._unhealthy_since[uuid]
        return HealthChange(uuid=uuid, healthy=True, reason=f"no critical event for {self.recovery_s:g}s")

    def unhealthy(self) -> frozenset[DeviceUUID]:
        return frozenset(self._unhealthy_since)
