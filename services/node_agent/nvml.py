"""NVML ``DeviceSource``: real GPUs through pynvml (the ``nvidia-ml-py`` distribution).

Owns every pynvml call and converts NVML errors to :class:`DiscoveryError` once. Health comes
from XID critical-error events judged by :class:`HealthPolicy`; a device recovers through
:class:`HealthTracker` when it answers NVML again after a quiet period. Blocking NVML calls run
in worker threads. NUMA comes from ``/sys/bus/pci/devices/<bus id>/numa_node``. A card in MIG mode
reports its GPU instance profiles and legal placements, and this source is the node's
:class:`MigPort`: it creates exactly the reserved GPU instance + compute instance and destroys them
(HAMi v2.10 ``plugin/migmgr.go``; untested here on hardware: this machine has no GPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pynvml

from services.node_agent.discovery import (
    GiProfileInfo,
    HealthChange,
    HealthPolicy,
    HealthTracker,
    PhysicalDevice,
)
from services.node_agent.errors import DiscoveryError
from services.node_agent.mig import MigError, MigInstance, slice_key
from shared.model import DeviceUUID, MigPlacement

log = logging.getLogger(__name__)

_WAIT_MS = 1000
_SYSFS_PCI = Path("/sys/bus/pci/devices")
#: Slice key -> NVML GPU instance and compute instance profile (HAMi ``profileNameToGIProfileID``).
_GI_PROFILES = {
    f"{n}g": getattr(pynvml, f"NVML_GPU_INSTANCE_PROFILE_{n}_SLICE") for n in (1, 2, 3, 4, 6, 7, 8)
}
_CI_PROFILES = {
    f"{n}g": getattr(pynvml, f"NVML_COMPUTE_INSTANCE_PROFILE_{n}_SLICE") for n in (1, 2, 3, 4, 6, 7, 8)
}


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
            mig_enabled=(mig := self._mig_enabled(handle)),
            mig_capabilities=mig_capabilities(handle) if mig else (),
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

    # -- MIG (this node's MigPort) ------------------------------------------------------------
    async def create_instance(self, gpu: DeviceUUID, profile: str, placement: MigPlacement) -> MigInstance:
        try:
            return await asyncio.to_thread(_create_instance, gpu, profile, placement)
        except pynvml.NVMLError as e:
            raise MigError(f"create MIG {profile} at {placement} on {gpu}: {e}") from e

    async def destroy_instance(self, instance: MigInstance) -> None:
        try:
            await asyncio.to_thread(_destroy_instance, instance)
        except pynvml.NVMLError as e:
            raise MigError(f"destroy MIG {instance.mig_uuid} on {instance.gpu}: {e}") from e

    async def live_instances(self, gpu: DeviceUUID) -> tuple[MigInstance, ...]:
        try:
            return await asyncio.to_thread(_live_instances, gpu)
        except pynvml.NVMLError as e:
            raise MigError(f"list MIG instances on {gpu}: {e}") from e

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


# -- MIG through NVML (blocking: called in worker threads) ---------------------------------------


def _possible_placements(handle: Any, profile_id: int) -> tuple[MigPlacement, ...]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return tuple(MigPlacement(start=int(p.start), size=int(p.size)) for p in array[: count.value])


def mig_capabilities(handle: Any) -> tuple[GiProfileInfo, ...]:
    """Every GPU instance profile the card's MIG mode offers, with its legal placements."""
    out: list[GiProfileInfo] = []
    for key, profile in _GI_PROFILES.items():
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
            placements = _possible_placements(handle, info.id)
        except pynvml.NVMLError:
            continue  # the card has no such profile
        out.append(
            GiProfileInfo(
                slices=key,
                memory_mb=int(info.memorySizeMB),
                multiprocessors=int(info.multiprocessorCount),
                slice_count=int(info.sliceCount),
                instance_count=int(info.instanceCount),
                placements=placements,
            )
        )
    return tuple(out)


def _create_instance(gpu: DeviceUUID, profile: str, placement: MigPlacement) -> MigInstance:
    """HAMi ``EnsureAllocation``: the reserved placement or an error, never another placement."""
    key = slice_key(profile)
    if key not in _GI_PROFILES:
        raise MigError(f"unsupported MIG profile {profile!r}")
    handle = pynvml.nvmlDeviceGetHandleByUUID(gpu)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, _GI_PROFILES[key])
    if placement not in _possible_placements(handle, info.id):
        raise MigError(f"scheduler selected invalid placement {placement} for profile {profile}")
    where = pynvml.c_nvmlGpuInstancePlacement_t()
    where.start, where.size = placement.start, placement.size
    gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, info.id, ctypes.byref(where))
    try:
        gi_id = int(pynvml.nvmlGpuInstanceGetInfo(gi).id)
        ci_profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, _CI_PROFILES[key], pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        )
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
        try:
            ci_id = int(pynvml.nvmlComputeInstanceGetInfo(ci).id)
            mig_uuid = _mig_uuid(handle, gi_id)
        except BaseException:
            pynvml.nvmlComputeInstanceDestroy(ci)
            raise
    except BaseException:
        pynvml.nvmlGpuInstanceDestroy(gi)
        raise
    return MigInstance(
        gpu=gpu,
        profile=profile,
        placement=placement,
        mig_uuid=mig_uuid,
        gpu_instance_id=gi_id,
        compute_instance_id=ci_id,
    )


def _mig_uuid(handle: Any, gi_id: int) -> str:
    """The MIG device of GPU instance ``gi_id`` (HAMi ``findMigUUIDForGI``)."""
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            if pynvml.nvmlDeviceGetGpuInstanceId(mig) == gi_id:
                return _text(pynvml.nvmlDeviceGetUUID(mig))
        except pynvml.NVMLError_NotFound:
            continue
    raise MigError(f"no MIG device found for GPU instance {gi_id}")


def _destroy_instance(instance: MigInstance) -> None:
    """Destroy the compute and GPU instance; one already gone counts as destroyed (HAMi)."""
    handle = pynvml.nvmlDeviceGetHandleByUUID(instance.gpu)
    try:
        gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, instance.gpu_instance_id)
    except pynvml.NVMLError_NotFound:
        return
    with contextlib.suppress(pynvml.NVMLError_NotFound):
        ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, instance.compute_instance_id)
        pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)


def _live_instances(gpu: DeviceUUID) -> tuple[MigInstance, ...]:
    """Every GPU instance on the card, with its first compute instance (HAMi ``AdoptAllocation``)."""
    handle = pynvml.nvmlDeviceGetHandleByUUID(gpu)
    out: list[MigInstance] = []
    for key, profile in _GI_PROFILES.items():
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
        except pynvml.NVMLError:
            continue
        count = ctypes.c_uint(0)
        array = (pynvml.c_nvmlGpuInstance_t * max(int(info.instanceCount), 1))()
        pynvml.nvmlDeviceGetGpuInstances(handle, info.id, array, ctypes.byref(count))
        for gi in array[: count.value]:
            gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
            gi_id = int(gi_info.id)
            try:
                mig_uuid = _mig_uuid(handle, gi_id)
            except MigError:
                mig_uuid = ""  # a GPU instance without a compute instance has no MIG device
            out.append(
                MigInstance(
                    gpu=gpu,
                    profile=key,
                    placement=MigPlacement(
                        start=int(gi_info.placement.start), size=int(gi_info.placement.size)
                    ),
                    mig_uuid=mig_uuid,
                    gpu_instance_id=gi_id,
                    compute_instance_id=_first_compute_instance(gi, key),
                )
            )
    return tuple(out)


def _first_compute_instance(gi: Any, key: str) -> int:
    try:
        profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, _CI_PROFILES[key], pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        )
        count = ctypes.c_uint(0)
        array = (pynvml.c_nvmlComputeInstance_t * max(int(profile.instanceCount), 1))()
        pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile.id, array, ctypes.byref(count))
        return int(pynvml.nvmlComputeInstanceGetInfo(array[0]).id) if count.value else 0
    except pynvml.NVMLError:
        return 0
