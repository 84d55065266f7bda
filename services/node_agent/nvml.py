"""NVML ``DeviceSource``: real GPUs through pynvml (the ``nvidia-ml-py`` distribution).

Owns every pynvml call and converts NVML errors to :class:`DiscoveryError` once. Health comes
from XID critical-error events judged by :class:`HealthPolicy`; a device recovers through
:class:`HealthTracker` when it answers NVML again after a quiet period. Blocking NVML calls run
in worker threads. NUMA comes from ``/sys/bus/pci/devices/<bus id>/numa_node``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pynvml

from services.node_agent.discovery import HealthChange, HealthPolicy, HealthTracker, PhysicalDevice
from services.node_agent.errors import DiscoveryError
from shared.model import DeviceUUID

log = logging.getLogger(__name__)

_WAIT_MS = 1000
_SYSFS_PCI = Path("/sys/bus/pci/devices")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def numa_node(bus_id: str, sysfs: Path = _SYSFS_PCI) -> int:
    """NUMA node of a PCI device; NVML's 8-digit domain is shortened to sysfs' 4 digits; -1 -> 0."""
    short = bus_id.lower()[-12:]
    try:
        value = int((sysfs / short / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return 0
    return max(value, 0)


class NvmlSource:
    """GPUs as NVML sees them; construct with :meth:`open` (raises :class:`DiscoveryError`)."""

    def __init__(self, policy: HealthPolicy, recovery_s: float, preconfigured_memory_mib: int = 0) -> None:
        self._tracker = HealthTracker(policy=policy, recovery_s=recovery_s)
        self._policy = policy
        self._preconfigured = preconfigured_memory_mib
        self._closed = False
        self._devices: tuple[PhysicalDevice, ...] = ()

    @classmethod
    def open(cls, policy: HealthPolicy, recovery_s: float, preconfigured_memory_mib: int = 0) -> NvmlSource:
        source = cls(policy, recovery_s, preconfigured_memory_mib)
        try:
            pynvml.nvmlInit()
            source._devices = tuple(source._read(i) for i in range(pynvml.nvmlDeviceGetCount()))
        except pynvml.NVMLError as e:
            raise DiscoveryError(f"NVML is not usable on this node: {e}") from e
        return source

    def devices(self) -> tuple[PhysicalDevice, ...]:
        return self._devices

    def _read(self, index: int) -> PhysicalDevice:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return PhysicalDevice(
            uuid=DeviceUUID(_text(pynvml.nvmlDeviceGetUUID(handle))),
            index=index,
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            memory_mib=self._memory_mib(handle),
            numa=numa_node(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId)),
            mig_enabled=self._mig_enabled(handle),
        )

    def _memory_mib(self, handle: Any) -> int:
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
        except pynvml.NVMLError_NotSupported:
            return self._preconfigured

    @staticmethod
    def _mig_enabled(handle: Any) -> bool:
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError:
            return False
        return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)

    async def health_changes(self) -> AsyncIterator[HealthChange]:
        if not self._policy.enabled:
            log.info("XID health checks are disabled (DP_DISABLE_HEALTHCHECKS)")
            return
        event_set, unwatched = await asyncio.to_thread(self._register_events)
        try:
            for change in unwatched:
                yield change
            while not self._closed:
                for change in await asyncio.to_thread(self._wait_once, event_set):
                    yield change
        finally:
            await asyncio.to_thread(pynvml.nvmlEventSetFree, event_set)

    def _register_events(self) -> tuple[Any, list[HealthChange]]:
        event_set = pynvml.nvmlEventSetCreate()
        changes: list[HealthChange] = []
        for device in self._devices:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(device.uuid)
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except pynvml.NVMLError as e:
                # A device we cannot watch could fail unseen; NVIDIA's plugin marks it unhealthy too.
                log.warning("cannot watch XID events of %s: %s; marking it unhealthy", device.uuid, e)
                change = self._tracker.on_unwatchable(device.uuid, time.monotonic(), f"no XID events: {e}")
                if change is not None:
                    changes.append(change)
        return event_set, changes

    def _wait_once(self, event_set: Any) -> list[HealthChange]:
        now = time.monotonic()
        try:
            data = pynvml.nvmlEventSetWait_v2(event_set, _WAIT_MS)
        except pynvml.NVMLError_Timeout:
            data = None
        except pynvml.NVMLError as e:
            # As NVIDIA's plugin: a broken event wait means we are blind, so every device is suspect.
            log.warning("NVML event wait failed: %s; marking every device unhealthy", e)
            time.sleep(_WAIT_MS / 1000)  # in the worker thread: do not spin on a broken event set
            return self._all_lost(now, f"NVML event wait failed: {e}") + self._probe_unhealthy(now)
        changes = self._on_event(data, now) if data is not None else []
        return changes + self._probe_unhealthy(now)

    def _on_event(self, data: Any, now: float) -> list[HealthChange]:
        if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
            return []
        xid = int(data.eventData)
        if not self._policy.is_critical(xid):
            log.info("ignoring XID %d (HAMi/NVIDIA application error or DP_DISABLE_HEALTHCHECKS)", xid)
            return []
        try:
            uuid = DeviceUUID(_text(pynvml.nvmlDeviceGetUUID(data.device)))
        except pynvml.NVMLError as e:
            log.warning("XID %d on a device NVML cannot name (%s); marking every device unhealthy", xid, e)
            return self._all_lost(now, f"XID {xid} on an unknown device")
        change = self._tracker.on_xid(uuid, xid, now)
        return [change] if change is not None else []

    def _all_lost(self, now: float, reason: str) -> list[HealthChange]:
        changes = (self._tracker.on_lost(d.uuid, now, reason) for d in self._devices)
        return [c for c in changes if c is not None]

    def _probe_unhealthy(self, now: float) -> list[HealthChange]:
        changes: list[HealthChange] = []
        for uuid in self._tracker.unhealthy():
            try:
                pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByUUID(uuid))
            except pynvml.NVMLError as e:
                self._tracker.on_lost(uuid, now, f"NVML query failed: {e}")
                continue
            change = self._tracker.on_probe_ok(uuid, now)
            if change is not None:
                changes.append(change)
        return changes

    async def close(self) -> None:
        self._closed = True
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
