"""The node-agent as the kubelet and the bus see it: registration, restarts, health, inventory, bad input.

Real nats-server, real gRPC over unix sockets, the SimKubelet peer; no mocks.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from pathlib import Path

import grpc
import msgpack
import pytest
from asyncwait import wait_until
from test_node_agent_rig import Rig, rig

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from services.node_agent.discovery import HealthChange
from services.node_agent.health import health_subject
from shared.annotations import NODE_REGISTER
from shared.bus import INVENTORY, Bus
from shared.events import DeviceHealth, Inventory


async def test_agent_registers_and_advertises_every_replica_with_numa(bus: Bus) -> None:
    async with rig(bus, spec="1xA10+1xT4@1") as r:
        assert r.kubelet.registrations == 1 and r.kubelet.registration_errors == []
        a, t4 = r.gpus
        assert set(r.kubelet.devices()) == {f"{u}-{i}" for u in (a, t4) for i in range(4)}
        assert set(r.kubelet.devices().values()) == {"Healthy"}
        assert r.kubelet.numa_of(f"{t4}-3") == (1,)
        assert r.metric("gpubus_node_agent_registrations_total", result="ok") == 1


async def test_kubelet_restart_leads_to_reregistration_and_a_fresh_device_list(bus: Bus) -> None:
    async with rig(bus) as r:
        await r.kubelet.restart()
        await r.kubelet.wait_for(lambda: r.kubelet.registrations == 2 and len(r.kubelet.devices()) == 8)
        assert set(r.kubelet.devices().values()) == {"Healthy"}
        assert r.settings.plugin_socket.exists()


async def test_agent_registers_when_the_kubelet_comes_up_after_it(bus: Bus) -> None:
    r = Rig(bus)
    try:
        await r.start_agent()
        assert r.agent is not None and r.agent.plugin.registrations == 0
        await r.kubelet.start()
        await r.kubelet.wait_for(lambda: r.kubelet.registrations == 1 and len(r.kubelet.devices()) == 8)
    finally:
        await r.close()


async def test_health_change_is_streamed_published_and_recovers(bus: Bus) -> None:
    async with rig(bus) as r:
        gpu = r.gpus[1]
        before = r.kubelet.updates()
        reply = json.loads(
            await bus.request(
                health_subject(r.node),
                json.dumps({"uuid": gpu, "healthy": False, "reason": "XID 79"}).encode(),
                timeout=2,
            )
        )
        assert reply == {"ok": True, "uuid": gpu}
        await r.kubelet.wait_for(lambda: r.kubelet.devices()[f"{gpu}-0"] == "Unhealthy")
        assert r.kubelet.updates() == before + 1
        assert {i for i, h in r.kubelet.devices().items() if h == "Unhealthy"} == {
            f"{gpu}-{i}" for i in range(4)
        }
        await wait_until(lambda: any(not e.healthy for e in r.of(DeviceHealth)), what="device.health down")

        await bus.request(
            health_subject(r.node), json.dumps({"index": 1, "healthy": True}).encode(), timeout=2
        )
        await r.kubelet.wait_for(lambda: set(r.kubelet.devices().values()) == {"Healthy"})
        await wait_until(
            lambda: [e.healthy for e in r.of(DeviceHealth)] == [False, True], what="recovery event"
        )
        await wait_until(lambda: any(e.generation == 2 for e in r.of(Inventory)), what="inventory on change")


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"not json", "Expecting value"),
        (b'{"uuid": "GPU-nope", "healthy": false}', "no GPU 'GPU-nope'"),
        (b'{"index": 0}', "healthy"),
    ],
)
async def test_bad_health_request_is_refused_and_counted(bus: Bus, payload: bytes, error: str) -> None:
    async with rig(bus) as r:
        reply = json.loads(await bus.request(health_subject(r.node), payload, timeout=2))
        assert reply["ok"] is False and error in reply["error"]
        assert r.metric("gpubus_node_agent_bad_requests_total", method="health_query") == 1
        assert set(r.kubelet.devices().values()) == {"Healthy"}


async def test_inventory_is_published_and_kept_in_kv(bus: Bus) -> None:
    async with rig(bus, spec="2xA100-80GB") as r:
        await wait_until(lambda: bool(r.of(Inventory)), what="inventory event")
        event = r.of(Inventory)[0]
        assert [d.id for d in event.devices] == r.gpus
        assert {(d.type, d.devmem, d.count, d.health) for d in event.devices} == {
            ("NVIDIA-A100-SXM4-80GB", 81920, 4, True)
        }
        kv = await bus.kv(INVENTORY)

        async def stored() -> bool:  # the event goes out first, the KV write right after it
            entry = await kv.get(r.node)
            return entry is not None and msgpack.unpackb(entry.value)["devices"][0]["id"] == r.gpus[0]

        await wait_until(stored, what="inventory in KV")


async def test_node_register_annotation_is_written_in_hamis_json_and_follows_health(
    bus: Bus, tmp_path: Path
) -> None:
    async with SimApiServer() as api:
        kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        r = Rig(bus, spec="1xA10")
        r.kube = kube
        try:
            await kube.create_node({"metadata": {"name": r.node}})
            await r.start()

            async def register() -> list[dict[str, object]]:
                node = await kube.get_node(r.node)
                value = ((node or {}).get("metadata") or {}).get("annotations", {}).get(NODE_REGISTER, "[]")
                return list(json.loads(value))

            await wait_until(lambda: _nonempty(register()), what="register annotation")
            assert await register() == [
                {
                    "id": r.gpus[0],
                    "count": 4,
                    "devmem": 24576,
                    "devcore": 100,
                    "type": "NVIDIA-A10",
                    "mode": "hami-core",
                    "health": True,
                }
            ]
            r.agent.apply_health(HealthChange(uuid=r.gpus[0], healthy=False, reason="test"))  # type: ignore[union-attr]
            await wait_until(lambda: _unhealthy(register()), what="annotation shows the device unhealthy")
        finally:
            await r.close()
            await kube.close()


async def test_node_status_carries_gpu_memory_and_cores_and_follows_health(bus: Bus, tmp_path: Path) -> None:
    """HAMi's v2.11 roadmap (vgpu-manager has it): the node's memory and cores as Node resources."""
    async with SimApiServer() as api:
        kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        r = Rig(bus, spec="2xA10")
        r.kube = kube
        try:
            await kube.create_node({"metadata": {"name": r.node}})
            await r.start()

            async def resources() -> tuple[dict[str, str], dict[str, str]]:
                status = ((await kube.get_node(r.node)) or {}).get("status") or {}
                return status.get("capacity") or {}, status.get("allocatable") or {}

            async def published(allocatable_mem: str) -> bool:
                capacity, allocatable = await resources()
                return (
                    capacity.get("nvidia.com/gpumem") == "49152"
                    and capacity.get("nvidia.com/gpucores") == "200"
                    and allocatable.get("nvidia.com/gpumem") == allocatable_mem
                )

            await wait_until(lambda: published("49152"), what="capacity on the Node")
            r.agent.apply_health(HealthChange(uuid=r.gpus[0], healthy=False, reason="test"))  # type: ignore[union-attr]
            await wait_until(lambda: published("24576"), what="allocatable without the unhealthy card")
            assert (await resources())[1]["nvidia.com/gpucores"] == "100"
        finally:
            await r.close()
            await kube.close()


async def _nonempty(items: Awaitable[list[dict[str, object]]]) -> bool:
    return bool(await items)


async def _unhealthy(items: Awaitable[list[dict[str, object]]]) -> bool:
    return "health" not in (await items)[0]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (pb.AllocateRequest(), "without container requests"),
        (pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest()]), "without device ids"),
        (
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=["GPU-x-0"])]),
            "unknown device id 'GPU-x-0'",
        ),
    ],
)
async def test_bad_allocate_input_gets_invalid_argument_and_is_counted(
    bus: Bus, request_: pb.AllocateRequest, message: str
) -> None:
    async with rig(bus) as r, grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.DevicePluginStub(channel).Allocate(request_)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in (info.value.details() or "")
        assert r.metric("gpubus_node_agent_bad_requests_total", method="Allocate") == 1


async def test_bad_preferred_allocation_size_gets_invalid_argument(bus: Bus) -> None:
    async with rig(bus) as r, grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=[f"{r.gpus[0]}-0"], allocation_size=3
                )
            ]
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.DevicePluginStub(channel).GetPreferredAllocation(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert r.metric("gpubus_node_agent_bad_requests_total", method="GetPreferredAllocation") == 1


async def test_plugin_options_advertise_preferred_allocation(bus: Bus) -> None:
    async with rig(bus) as r, grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
        options = await pb_grpc.DevicePluginStub(channel).GetDevicePluginOptions(pb.Empty())
        assert options.get_preferred_allocation_available and not options.pre_start_required
        await pb_grpc.DevicePluginStub(channel).PreStartContainer(pb.PreStartContainerRequest())
