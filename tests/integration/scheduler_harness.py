"""A scheduler under test: a real SchedulerApp on a loopback port, real NATS, the SimApiServer.

Helpers register simulated nodes the way a node-agent does (inventory KV + inventory event),
create pods in the API server and speak the extender protocol exactly as kube-scheduler does.
"""

from __future__ import annotations

import io
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from services.scheduler.settings import SchedulerSettings
from shared.bus import INVENTORY, Bus, BusSettings, Subscription
from shared.events import AllocationApplied, AllocationDecided, Event, Inventory
from shared.inventory_entries import encode_inventory
from shared.model import DeviceInfo, DeviceUUID

GPU_MEM = 80_000


def gpu_pod(
    name: str,
    *containers: Mapping[str, str],
    init: tuple[Mapping[str, str], ...] = (),
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
    scheduler: str = "gpubus-scheduler",
) -> dict[str, Any]:
    """A pod whose containers ask for the given GPU limits (an empty mapping: no GPU)."""

    def ctr(prefix: str, i: int, limits: Mapping[str, str]) -> dict[str, Any]:
        c: dict[str, Any] = {"name": f"{prefix}{i}", "image": "cuda:12"}
        if limits:
            c["resources"] = {"limits": dict(limits)}
        return c

    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [ctr("c", i, lim) for i, lim in enumerate(containers)],
    }
    if init:
        spec["initContainers"] = [ctr("init", i, lim) for i, lim in enumerate(init)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})},
        "spec": spec,
    }


def slice_of(mem: int, cores: int = 0, count: int = 1) -> dict[str, str]:
    return {"nvidia.com/gpu": str(count), "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": str(cores)}


def devices_for(node: str, n: int, *, count: int = 10, mem: int = GPU_MEM) -> tuple[DeviceInfo, ...]:
    return tuple(
        DeviceInfo(
            id=DeviceUUID(f"GPU-{node}-{i}"), index=i, type="NVIDIA-A100-SXM4-80GB", count=count, devmem=mem
        )
        for i in range(n)
    )


async def register_node(
    bus: Bus, node: str, gpus: int = 2, *, ts: float | None = None, heartbeat_s: float = 30.0, count: int = 10
) -> Inventory:
    """What a node-agent does: inventory in KV, and the inventory event."""
    event = Inventory(
        devices=devices_for(node, gpus, count=count),
        node=node,
        heartbeat_s=heartbeat_s,
        ts=time.time() if ts is None else ts,
        source=f"node-agent/{node}",
    )
    kv = await bus.kv(INVENTORY)
    await kv.put(node, encode_inventory(event))
    await bus.publish(event)
    return event


async def create_node(kube: SimKubeClient, name: str) -> None:
    await kube.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


async def allocate_ran(bus: Bus, pod: Mapping[str, Any], node: str) -> None:
    """What a node-agent says once the kubelet's Allocate served every GPU container of ``pod``:
    its entry becomes APPLIED, and the pod's handoff slots on ``node`` are free again."""
    meta = pod["metadata"]
    await bus.publish(AllocationApplied(pod_uid=meta["uid"], namespace=meta.get("namespace", "default"),
                                        name=meta["name"], container="c0", device_ids=(), complete=True,
                                        node=node))


async def fake_node_agent(bus: Bus) -> Subscription:
    """Reports each decided pod allocated, as the node-agent does once the kubelet's Allocate ran."""

    async def on_decided(event: Event) -> None:
        if isinstance(event, AllocationDecided):
            a = event.allocation
            await allocate_ran(bus, {"metadata": {"uid": a.pod_uid, "namespace": a.namespace,
                                                  "name": a.name}}, a.node)

    return await bus.subscribe("gpubus.allocation.decided.>", on_decided, deliver="new")


def scheduler_settings(kubeconfig: Path | None, **overrides: Any) -> SchedulerSettings:
    values: dict[str, Any] = {
        "bind": "127.0.0.1",
        "port": 0,
        "kubeconfig": str(kubeconfig) if kubeconfig else None,
        "leader_ttl_s": 2.0,
        "lease_ttl_s": 5.0,
        "bind_timeout_s": 10.0,
        "replica_id": "replica-a",
    }
    values.update(overrides)
    return SchedulerSettings(**values)


def scheduler_app(bus_settings: BusSettings, kubeconfig: Path | None, **overrides: Any) -> SchedulerApp:
    """A replica with the test settings, to enter with ``async with``."""
    return SchedulerApp(scheduler_settings(kubeconfig, **overrides), bus_settings)


class ExtenderClient:
    """kube-scheduler's side of the extender protocol."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self._session = session
        self.base = f"http://127.0.0.1:{port}"

    async def post(self, verb: str, body: Any, *, raw: bytes | None = None) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"data": io.BytesIO(raw)} if raw is not None else {"json": body}
        async with self._session.post(f"{self.base}/{verb}", **kwargs) as resp:
            return resp.status, await resp.json(content_type=None)

    async def filter(self, pod: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
        status, body = await self.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
        assert status == 200, body
        return dict(body)

    async def prioritize(self, pod: Mapping[str, Any], names: list[str]) -> dict[str, int]:
        status, body = await self.post("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": names})
        assert status == 200, body
        return {p["Host"]: p["Score"] for p in body}

    async def bind(self, pod: Mapping[str, Any], node: str) -> str:
        meta = pod["metadata"]
        status, body = await self.post(
            "bind",
            {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node},
        )
        assert status == 200, body
        return str(body["Error"])

    async def get(self, path: str) -> tuple[int, str]:
        async with self._session.get(f"{self.base}{path}") as resp:
            return resp.status, await resp.text()
