"""What this node advertises: registered devices (HAMi's register fields) and kubelet replicas.

Pure: physical devices + settings + current health in, ``DeviceInfo`` tuples and ``<UUID>-<i>``
replica lists out. Filtering (``filterdevices``), memory/core scaling and HAMi's type naming
happen here and nowhere else. It knows nothing about gRPC, NATS or Kubernetes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from services.node_agent.discovery import PhysicalDevice
from services.node_agent.mig import card_profiles, instance_count
from services.node_agent.settings import NodeAgentSettings
from shared.model import NVIDIA, DeviceInfo, DeviceMode, DeviceUUID


@dataclass(frozen=True, slots=True, kw_only=True)
class Replica:
    """One kubelet device: replica ``i`` of a physical GPU."""

    id: str
    uuid: DeviceUUID
    healthy: bool
    numa: int | None


def device_type(nvml_name: str) -> str:
    """HAMi's type: the NVML name, prefixed ``NVIDIA-`` unless it already starts with ``NVIDIA``."""
    return nvml_name if nvml_name.startswith(NVIDIA) else f"{NVIDIA}-{nvml_name}"


def replica_id(uuid: str, i: int) -> str:
    return f"{uuid}-{i}"


def physical_uuid(device_id: str) -> DeviceUUID:
    """HAMi's rule: strip a ``::suffix``, or strip ``-N`` when the ID has exactly 6 dashes."""
    if "::" in device_id:
        return DeviceUUID(device_id.split("::", 1)[0])
    if device_id.count("-") == 6:
        return DeviceUUID(device_id.rsplit("-", 1)[0])
    return DeviceUUID(device_id)


def visible(devices: Iterable[PhysicalDevice], settings: NodeAgentSettings) -> tuple[PhysicalDevice, ...]:
    """Devices minus ``filterdevices`` (by UUID or index)."""
    hidden_uuids = set(settings.filter_uuids)
    hidden_indexes = set(settings.filter_indexes)
    return tuple(d for d in devices if d.uuid not in hidden_uuids and d.index not in hidden_indexes)


def device_info(device: PhysicalDevice, settings: NodeAgentSettings, healthy: bool) -> DeviceInfo:
    """HAMi v2.10 ``plugin/register.go``: in mig mode the card registers its unscaled memory, 100
    cores, its allowed MIG profiles, and as many slots as one profile has instances."""
    if device.mig_enabled or settings.operating_mode == DeviceMode.MIG.value:
        profiles = card_profiles(device_type(device.name), device.mig_capabilities)
        return DeviceInfo(
            id=device.uuid,
            index=device.index,
            type=device_type(device.name),
            count=instance_count(device.mig_capabilities, profiles),
            devmem=device.memory_mib,
            devcore=100,
            numa=device.numa,
            mode=DeviceMode.MIG.value,
            health=healthy,
            mig_profiles=profiles,
        )
    return DeviceInfo(
        id=device.uuid,
        index=device.index,
        type=device_type(device.name),
        count=settings.device_split_count,
        devmem=math.floor(device.memory_mib * settings.device_memory_scaling),
        devcore=int(settings.device_core_scaling * 100),
        numa=device.numa,
        mode=settings.operating_mode,
        health=healthy,
    )


def device_infos(
    devices: Iterable[PhysicalDevice], settings: NodeAgentSettings, unhealthy: frozenset[DeviceUUID]
) -> tuple[DeviceInfo, ...]:
    """Every visible card; a card in mig mode without an allowed profile is left out, as HAMi does."""
    infos = (device_info(d, settings, d.uuid not in unhealthy) for d in visible(devices, settings))
    return tuple(i for i in infos if i.mode != DeviceMode.MIG.value or i.mig_profiles)


def node_resources(devices: Iterable[DeviceInfo], settings: NodeAgentSettings) -> dict[str, dict[str, str]]:
    """The Node status the node-agent publishes (merge patch body): total memory (in memory-factor
    units) and cores of every registered card as ``capacity``, of the healthy ones as
    ``allocatable``, as the kubelet does with a device plugin's healthy devices."""
    cards = list(devices)

    def amounts(chosen: list[DeviceInfo]) -> dict[str, str]:
        return {
            settings.resource_memory_name: str(sum(d.devmem for d in chosen) // settings.memory_factor),
            settings.resource_cores_name: str(sum(d.devcore for d in chosen)),
        }

    return {"capacity": amounts(cards), "allocatable": amounts([d for d in cards if d.health])}


def replicas(infos: Iterable[DeviceInfo], with_numa: bool) -> tuple[Replica, ...]:
    """``count`` replicas per device, in device order then replica order."""
    return tuple(
        Replica(
            id=replica_id(info.id, i),
            uuid=info.id,
            healthy=info.health,
            numa=info.numa if with_numa else None,
        )
        for info in infos
        for i in range(info.count)
    )
