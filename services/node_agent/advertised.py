"""What this node advertises right now: devices with health, kubelet replicas, and a change signal.

Level-triggered: every change bumps ``generation`` and wakes every waiter, who then reads the
whole current state (ListAndWatch sends the full list; inventory events carry the full node).
No I/O here; the NVML/simulated source feeds health in, the shells read snapshots out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from services.node_agent.discovery import HealthChange, PhysicalDevice
from services.node_agent.inventory import Replica, device_infos, replicas, visible
from services.node_agent.settings import NodeAgentSettings
from shared.model import DeviceInfo, DeviceUUID


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    generation: int
    devices: tuple[DeviceInfo, ...]
    replicas: tuple[Replica, ...]


class Advertised:
    """The node's current advertisement; :meth:`apply` health changes, :meth:`changed` to wait."""

    def __init__(self, devices: tuple[PhysicalDevice, ...], settings: NodeAgentSettings) -> None:
        self._physical = visible(devices, settings)
        self._settings = settings
        self._unhealthy: set[DeviceUUID] = {d.uuid for d in self._physical if not d.healthy}
        self._changed = asyncio.Event()
        self._snapshot = self._build(0)
        self.uuid_of: Mapping[str, DeviceUUID] = {r.id: r.uuid for r in self._snapshot.replicas}
        """Every replica ID this node has advertised -> its physical UUID (fixed for the agent's life)."""

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def known(self, uuid: str) -> bool:
        return any(d.uuid == uuid for d in self._physical)

    def physical_by_index(self, index: int) -> DeviceUUID | None:
        return next((d.uuid for d in self._physical if d.index == index), None)

    def apply(self, change: HealthChange) -> bool:
        """Record a health change; False if it changes nothing (unknown device or same health)."""
        if not self.known(change.uuid):
            return False
        if change.healthy == (change.uuid not in self._unhealthy):
            return False
        if change.healthy:
            self._unhealthy.discard(change.uuid)
        else:
            self._unhealthy.add(change.uuid)
        self._snapshot = self._build(self._snapshot.generation + 1)
        self._changed.set()
        self._changed = asyncio.Event()
        return True

    async def changed(self, since_generation: int) -> Snapshot:
        """Return as soon as the generation is past ``since_generation``."""
        while self._snapshot.generation <= since_generation:
            await self._changed.wait()
        return self._snapshot

    def _build(self, generation: int) -> Snapshot:
        infos = device_infos(self._physical, self._settings, frozenset(self._unhealthy))
        return Snapshot(
            generation=generation,
            devices=infos,
            replicas=replicas(infos, self._settings.enable_numa_topology),
        )
