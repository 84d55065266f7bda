"""The test rig for node-agent integration tests (no tests here): a real agent, a real kubelet peer.

``Rig`` wires a :class:`NodeAgent` with simulated GPUs to a :class:`SimKubelet` over unix
sockets in a short temp dir (socket paths must stay under 108 bytes) and plays the
scheduler's part on a real bus: ledger entry in KV ``allocations`` plus ``allocation.decided``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgpack

from gpubus_local.sim.kubelet import SimContainer, SimKubelet, SimPod
from services.node_agent.app import NodeAgent
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.simulated import SimulatedSource
from shared.bus import ALLOCATIONS, Bus, BusSettings
from shared.codec import to_wire
from shared.events import AllocationDecided, AllocationReleased, Event
from shared.kube import KubeApi
from shared.model import Allocation, ContainerDevice, DeviceUUID, NodeName, PodUID


def make_bus_settings(url: str) -> BusSettings:
    return BusSettings(
        url=url,
        name="node-agent-test",
        reconnect_wait_s=0.1,
        initial_connect_timeout_s=5.0,
        request_timeout_s=2.0,
        flush_timeout_s=2.0,
    )


class Rig:
    """One node: agent + kubelet + an event recorder, all on real sockets and a real bus."""

    def __init__(
        self, bus: Bus, *, spec: str = "2xA100-80GB", honor_preferred: bool = True, **overrides: Any
    ) -> None:
        self.bus = bus
        self.node = f"node-{uuid.uuid4().hex[:8]}"
        self.dir = Path(tempfile.mkdtemp(prefix="na-", dir="/tmp"))
        values: dict[str, Any] = {
            "node_name": self.node,
            "simulate": spec,
            "device_split_count": 4,
            "plugin_dir": str(self.dir / "dp"),
            "pod_resources_socket": str(self.dir / "pr" / "kubelet.sock"),
            "hook_path": str(self.dir / "hook"),
            "allocate_wait_s": 2.0,
            "verify_delay_s": 0.05,
            "watch_interval_s": 0.05,
            "metrics_port": 0,
        }
        values.update(overrides)
        self.settings = NodeAgentSettings(**values)
        self.kubelet = SimKubelet(
            Path(self.settings.plugin_dir),
            Path(self.settings.pod_resources_socket),
            honor_preferred=honor_preferred,
        )
        self.events: list[Event] = []
        self.agent: NodeAgent | None = None
        self._agent_exits = AsyncExitStack()
        self.kube: KubeApi | None = None
        """Set before :meth:`start` to have the agent write the node register annotation."""

    @property
    def gpus(self) -> list[DeviceUUID]:
        return [d.uuid for d in SimulatedSource(self.node, self.settings.simulate).devices()]

    def new_agent(self) -> NodeAgent:
        source = SimulatedSource(self.node, self.settings.simulate)
        return NodeAgent(self.settings, source=source, bus=self.bus, kube=self.kube)

    async def start(self) -> None:
        await self.kubelet.start()
        await self.bus.subscribe(f"gpubus.*.*.{self.node}", self._record, deliver="all")
        await self.start_agent()

    async def start_agent(self) -> None:
        """Start an agent; with the kubelet up, wait until it registered and advertised healthy devices."""
        before = self.kubelet.registrations
        await self.enter(self.new_agent())
        if self.settings.kubelet_socket.exists():
            await self.kubelet.wait_for(
                lambda: (
                    self.kubelet.registrations > before
                    and set(self.kubelet.devices().values()) == {"Healthy"}
                    and len(self.kubelet.devices()) == self.settings.device_split_count * len(self.gpus)
                )
            )

    async def enter(self, agent: NodeAgent) -> NodeAgent:
        """Start ``agent`` as this rig's agent (:meth:`stop_agent` stops it)."""
        self.agent = await self._agent_exits.enter_async_context(agent)
        return agent

    async def stop_agent(self) -> None:
        await self._agent_exits.aclose()
        self.agent = None

    async def close(self) -> None:
        await self.stop_agent()
        await self.kubelet.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    async def _record(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    # -- the scheduler's part ------------------------------------------------------------------
    def allocation(self, name: str, *slots: list[tuple[int, int, int]], init_count: int = 0) -> Allocation:
        """``slots``: per container a list of (gpu index, MiB, cores)."""
        gpus = self.gpus
        devices = tuple(
            tuple(
                ContainerDevice(uuid=gpus[i], usedmem=mem, usedcores=cores, idx=i) for i, mem, cores in slot
            )
            for slot in slots
        )
        return Allocation(
            pod_uid=PodUID(f"uid-{name}-{uuid.uuid4().hex[:6]}"),
            namespace="ns",
            name=name,
            node=NodeName(self.node),
            devices=devices,
            containers=tuple(f"c{i}" for i in range(len(slots))),
            init_count=init_count,
        )

    async def decide(
        self, allocation: Allocation, *, event: bool = True, leases: dict[str, int] | None = None
    ) -> None:
        kv = await self.bus.kv(ALLOCATIONS)
        await kv.put(allocation.pod_uid, msgpack.packb(to_wire(allocation), use_bin_type=True))
        if event:
            decided = AllocationDecided(node=self.node, allocation=allocation, leases=leases or {})
            await self.bus.publish(decided)

    async def release(self, allocation: Allocation) -> None:
        await (await self.bus.kv(ALLOCATIONS)).delete(allocation.pod_uid)
        await self.bus.publish(
            AllocationReleased(
                node=self.node,
                pod_uid=allocation.pod_uid,
                namespace=allocation.namespace,
                name=allocation.name,
                why="deleted",
            )
        )

    @staticmethod
    def pod(allocation: Allocation, *, init_count: int = 0) -> SimPod:
        """The pod the kubelet sees for ``allocation`` (same container names and device counts)."""
        return SimPod(
            namespace=allocation.namespace,
            name=allocation.name,
            uid=allocation.pod_uid,
            containers=tuple(
                SimContainer(name=name, gpus=len(devs), init=i < init_count)
                for i, (name, devs) in enumerate(zip(allocation.containers, allocation.devices, strict=True))
            ),
        )

    def metric(self, name: str, **labels: str) -> float:
        assert self.agent is not None
        value = self.agent.metrics.registry.get_sample_value(name, labels or None)
        return value or 0.0

    def with_settings(self, **changes: Any) -> None:
        self.settings = dataclasses.replace(self.settings, **changes)


@contextlib.asynccontextmanager
async def rig(bus: Bus, **kwargs: Any) -> AsyncIterator[Rig]:
    r = Rig(bus, **kwargs)
    try:
        await r.start()
        await r.kubelet.wait_for(lambda: len(r.kubelet.devices()) == 4 * len(r.gpus))
        yield r
    finally:
        await r.close()
