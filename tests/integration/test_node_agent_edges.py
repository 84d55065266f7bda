"""Bad input at every edge of the node-agent: a clear error, a counted metric, never a crash.

Cases: a decision that names a GPU this node does not have (by event, and from KV on restart);
a huge device ID (refused with a clipped message); must-include beyond the allocation size; a
health request whose index is a boolean or whose JSON nests too deep; a node whose GPUs are all
filtered out (no kubelet registration, an empty inventory); a plugin socket path the kernel
cannot bind. Real nats-server, real gRPC over unix sockets, the SimKubelet peer.
"""

from __future__ import annotations

import dataclasses
import json

import grpc
import msgpack
import pytest
from asyncwait import wait_until
from test_node_agent_rig import Rig, rig

from gpubus_local.sim.kubelet import AdmissionError
from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from services.node_agent.errors import PluginSocketError
from services.node_agent.health import health_subject
from shared.bus import INVENTORY, Bus
from shared.events import AllocationFailed
from shared.model import Allocation, ContainerDevice, DeviceUUID


def _elsewhere(r: Rig, name: str) -> Allocation:
    decision = r.allocation(name, [(0, 1000, 10)])
    stray = ContainerDevice(uuid=DeviceUUID("GPU-on-another-node"), usedmem=1000, usedcores=10)
    return dataclasses.replace(decision, devices=((stray,),))


async def test_a_decision_for_a_gpu_this_node_lacks_is_refused_counted_and_failed(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        decision = _elsewhere(r, "stray")
        await r.decide(decision)
        await wait_until(lambda: bool(r.of(AllocationFailed)), what="allocation.failed")
        failed = r.of(AllocationFailed)[0]
        assert failed.pod_uid == decision.pod_uid
        assert "GPU 'GPU-on-another-node' is not advertised by this node" in failed.reason
        assert r.metric("gpubus_node_agent_bad_requests_total", method="allocation_event") == 1
        assert r.agent is not None and decision.pod_uid not in r.agent.handoff.table
        with pytest.raises(AdmissionError, match="no allocation decided for this node"):
            await r.kubelet.admit(r.pod(r.allocation("stray", [(0, 1000, 10)])))


async def test_a_broken_decision_in_kv_is_counted_when_the_agent_rebuilds(bus: Bus) -> None:
    async with rig(bus) as r:
        decision = _elsewhere(r, "stray-kv")
        await r.decide(decision, event=False)
        await r.stop_agent()
        await r.start_agent()
        assert r.metric("gpubus_node_agent_bad_requests_total", method="allocations_kv") == 1
        await wait_until(
            lambda: any(e.pod_uid == decision.pod_uid for e in r.of(AllocationFailed)),
            what="allocation.failed for the broken ledger entry",
        )


async def test_a_huge_device_id_is_refused_with_a_short_message(bus: Bus) -> None:
    async with rig(bus) as r, grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=["x" * 100_000])]
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.DevicePluginStub(channel).Allocate(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = info.value.details() or ""
        assert "unknown device id" in details and "(100000 chars)" in details and len(details) < 300
        assert r.metric("gpubus_node_agent_bad_requests_total", method="Allocate") == 1


async def test_must_include_beyond_the_allocation_size_is_invalid(bus: Bus) -> None:
    async with rig(bus) as r, grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
        ids = [f"{r.gpus[0]}-{i}" for i in range(3)]
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=ids, must_include_deviceIDs=ids, allocation_size=1
                )
            ]
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await pb_grpc.DevicePluginStub(channel).GetPreferredAllocation(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "3 must-include devices for an allocation of 1" in (info.value.details() or "")
        assert r.metric("gpubus_node_agent_bad_requests_total", method="GetPreferredAllocation") == 1


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b'{"index": true, "healthy": false}', "no GPU True"),
        (b"[" * 200_000, "health request is not JSON: nested too deep"),
        (b"\xff\xfe", "health request is not JSON"),
    ],
)
async def test_odd_health_requests_are_refused_and_counted(bus: Bus, payload: bytes, error: str) -> None:
    async with rig(bus) as r:
        reply = json.loads(await bus.request(health_subject(r.node), payload, timeout=2))
        assert reply["ok"] is False and error in reply["error"]
        assert r.metric("gpubus_node_agent_bad_requests_total", method="health_query") == 1
        assert set(r.kubelet.devices().values()) == {"Healthy"}


async def test_a_node_with_every_gpu_filtered_out_does_not_register_but_reports_no_devices(bus: Bus) -> None:
    r = Rig(bus, filter_indexes=(0, 1))
    try:
        await r.kubelet.start()
        agent = await r.enter(r.new_agent())
        assert r.kubelet.registrations == 0 and agent.plugin.registrations == 0
        assert not r.settings.plugin_socket.exists()
        kv = await bus.kv(INVENTORY)

        async def empty_inventory() -> bool:
            entry = await kv.get(r.node)
            return entry is not None and msgpack.unpackb(entry.value)["devices"] == []

        await wait_until(empty_inventory, what="empty inventory in KV")
    finally:
        await r.close()


async def test_a_plugin_socket_that_cannot_be_bound_fails_start_with_a_clear_error(bus: Bus) -> None:
    r = Rig(bus)
    r.with_settings(plugin_dir=str(r.dir / ("d" * 120)))
    try:
        with pytest.raises(PluginSocketError, match="unix socket paths must be at most 107 bytes"):
            async with r.new_agent():
                pass
    finally:
        await r.close()
