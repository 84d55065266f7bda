"""Hostile decisions and kubelet calls on a real node: refused with a reason, counted, never served.

Cases: a pod UID or container name Kubernetes never makes (a NUL byte) by event and from KV on
restart; limits no card can give (one GPU twice in a container, more memory or cores than the
card registered); a ``decided_at`` or release time far ahead of the node's clock, which must not
shadow the pod's retried decision; an Allocate call whose later container is bad (nothing of it
is recorded); must-include IDs never advertised or not offered. Real nats-server, real gRPC
over unix sockets, the SimKubelet peer.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import grpc
import msgpack
import pytest
from asyncwait import wait_until
from test_node_agent_rig import Rig, rig

from gpubus_local.sim.kubelet import AdmissionError
from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from shared.bus import ALLOCATIONS, Bus
from shared.codec import to_wire
from shared.events import AllocationApplied, AllocationDecided, AllocationFailed, AllocationReleased
from shared.model import Allocation, PodUID

BAD = "gpubus_node_agent_bad_requests_total"
Make = Callable[[Rig], Allocation]


def _failed_for(r: Rig, decision: Allocation) -> list[str]:
    return [e.reason for e in r.of(AllocationFailed) if e.pod_uid == decision.pod_uid]


async def _publish(r: Rig, decision: Allocation, key: str) -> None:
    """Ledger entry under ``key`` (the pod UID may not be a valid KV key) plus ``allocation.decided``."""
    await (await r.bus.kv(ALLOCATIONS)).put(key, msgpack.packb(to_wire(decision), use_bin_type=True))
    await r.bus.publish(AllocationDecided(node=r.node, allocation=decision))


def _nul_uid(r: Rig) -> Allocation:
    return dataclasses.replace(r.allocation("nul", [(0, 1000, 10)]), pod_uid=PodUID("uid-a\x00b"))


def _nul_container(r: Rig) -> Allocation:
    return dataclasses.replace(r.allocation("nulc", [(0, 1000, 10)]), containers=("c\x00",))


@pytest.mark.parametrize(
    ("make", "reason"),
    [(_nul_uid, "not a Kubernetes UID"), (_nul_container, "DNS-1123 labels")],
    ids=["pod-uid", "container"],
)
async def test_names_kubernetes_never_makes_are_refused_counted_and_free_the_size(
    bus: Bus, make: Make, reason: str
) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        decision = make(r)
        await _publish(r, decision, "bad-names")
        await wait_until(lambda: bool(_failed_for(r, decision)), what="allocation.failed")
        assert reason in _failed_for(r, decision)[0]
        assert r.metric(BAD, method="allocation_event") == 1
        assert r.agent is not None and decision.pod_uid not in r.agent.handoff.table
        following = r.allocation("next", [(1, 2000, 20)])
        await r.decide(following)  # same size: served, not refused as ambiguous
        answer = (await r.kubelet.admit(r.pod(following)))["c0"]
        assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"


async def test_ledger_entries_that_cannot_be_their_pods_are_skipped_and_counted_on_restart(bus: Bus) -> None:
    async with rig(bus) as r:
        await r.stop_agent()
        kv = await bus.kv(ALLOCATIONS)
        nul = _nul_uid(r)  # no KV key can hold a NUL: the entry is under another key
        await kv.put("bad-uid", msgpack.packb(to_wire(nul), use_bin_type=True))
        stray = r.allocation("stray", [(0, 1000, 10)])  # a valid pod's decision under another pod's key
        await kv.put("someone-else", msgpack.packb(to_wire(stray), use_bin_type=True))
        await r.start_agent()
        assert r.metric(BAD, method="allocations_kv") == 2
        with pytest.raises(AdmissionError, match="no allocation decided for this node"):
            await r.kubelet.admit(r.pod(stray))


def _same_gpu_twice(r: Rig) -> Allocation:
    return r.allocation("twice", [(0, 1000, 10), (0, 2000, 10)])


def _more_memory_than_the_card(r: Rig) -> Allocation:
    return r.allocation("huge", [(0, 81920 * 10, 10)])


def _more_cores_than_the_card(r: Rig) -> Allocation:
    return r.allocation("cores", [(0, 1000, 80)])


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_same_gpu_twice, "the same GPU twice"),
        (_more_memory_than_the_card, "exceeds the card's registered 81920 MiB"),
        (_more_cores_than_the_card, "exceeds the card's registered 81920 MiB / 50%"),
    ],
    ids=["same-gpu-twice", "memory", "cores"],
)
async def test_limits_no_card_can_give_are_refused_and_counted(bus: Bus, make: Make, reason: str) -> None:
    async with rig(bus, allocate_wait_s=0.2, device_core_scaling=0.5) as r:
        decision = make(r)
        await r.decide(decision)
        await wait_until(lambda: bool(_failed_for(r, decision)), what="allocation.failed")
        assert reason in _failed_for(r, decision)[0]
        assert r.metric(BAD, method="allocation_event") == 1
        with pytest.raises(AdmissionError, match="no allocation decided for this node"):
            await r.kubelet.admit(r.pod(decision))


def _retried(r: Rig, decision: Allocation) -> Allocation:
    """The scheduler's newer decision for the same pod after a failed bind: another GPU, now."""
    devices = r.allocation("x", [(1, 2000, 20)]).devices
    return dataclasses.replace(decision, decided_at=time.time(), devices=devices)


async def test_a_decision_dated_far_ahead_is_refused_and_does_not_shadow_the_retry(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        garbled = dataclasses.replace(r.allocation("ahead", [(0, 1000, 10)]), decided_at=1e300)
        await r.decide(garbled)
        await wait_until(lambda: bool(_failed_for(r, garbled)), what="allocation.failed")
        assert "ahead of this node's clock" in _failed_for(r, garbled)[0]
        assert r.metric(BAD, method="allocation_event") == 1
        await r.release(garbled)
        retry = _retried(r, garbled)
        await r.decide(retry)
        answer = (await r.kubelet.admit(r.pod(retry)))["c0"]
        assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"


async def test_a_release_dated_far_ahead_is_counted_and_does_not_shadow_the_retry(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        first = dataclasses.replace(r.allocation("rel", [(0, 1000, 10)]), decided_at=time.time() - 60)
        await r.decide(first)
        assert r.agent is not None
        agent = r.agent
        await wait_until(lambda: first.pod_uid in agent.handoff.table, what="decision cached")
        released = AllocationReleased(
            node=r.node, pod_uid=first.pod_uid, namespace="ns", name="rel", why="deleted", ts=1e300
        )
        await bus.publish(released)
        await wait_until(lambda: first.pod_uid not in agent.handoff.table, what="decision released")
        assert r.metric(BAD, method="allocation_event") == 1
        retry = _retried(r, first)
        await r.decide(retry)
        answer = (await r.kubelet.admit(r.pod(retry)))["c0"]
        assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"


def _allocate_request(*containers: list[str]) -> pb.AllocateRequest:
    requests = [pb.ContainerAllocateRequest(devices_ids=c) for c in containers]
    return pb.AllocateRequest(container_requests=requests)


@pytest.mark.parametrize(
    "second",
    [["GPU-bogus-0"], ["placeholder-0", "placeholder-1"]],
    ids=["unknown-id", "no-decision-of-that-size"],
)
async def test_an_allocate_whose_later_container_fails_records_nothing(bus: Bus, second: list[str]) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        decision = r.allocation("victim", [(0, 1000, 10)])
        await r.decide(decision)
        assert r.agent is not None
        agent = r.agent
        await wait_until(lambda: decision.pod_uid in agent.handoff.table, what="decision cached")
        if second[0].startswith("placeholder"):
            second = [f"{r.gpus[1]}-0", f"{r.gpus[1]}-1"]
        async with grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                request = _allocate_request([f"{r.gpus[0]}-0"], second)
                await pb_grpc.DevicePluginStub(channel).Allocate(request)
        assert decision.pod_uid in agent.handoff.table
        assert r.metric("gpubus_node_agent_allocations_total", outcome="applied") == 0
        answer = (await r.kubelet.admit(r.pod(decision)))["c0"]  # the kubelet's retry is served
        assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
        await wait_until(lambda: len(r.of(AllocationApplied)) == 1, what="one allocation.applied")
        assert r.of(AllocationApplied)[0].complete


async def test_one_allocate_for_two_containers_of_a_pod_answers_each_its_own_slot(bus: Bus) -> None:
    async with rig(bus) as r:
        decision = r.allocation("pair", [(0, 1000, 10)], [(1, 2000, 20)])
        await r.decide(decision)
        request = _allocate_request([f"{r.gpus[0]}-0"], [f"{r.gpus[1]}-0"])
        async with grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
            response = await pb_grpc.DevicePluginStub(channel).Allocate(request)
        memory = [c.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] for c in response.container_responses]
        assert memory == ["1000m", "2000m"]
        await wait_until(lambda: len(r.of(AllocationApplied)) == 2, what="two allocation.applied")
        assert [(e.container, e.complete) for e in r.of(AllocationApplied)] == [("c0", False), ("c1", True)]


@pytest.mark.parametrize(
    ("must", "message"),
    [(["bogus-id"], "unknown device id 'bogus-id'"), (["GPU1-2"], "is not among the available devices")],
    ids=["never-advertised", "not-available"],
)
async def test_must_include_ids_never_advertised_or_not_offered_are_invalid(
    bus: Bus, must: list[str], message: str
) -> None:
    async with rig(bus) as r:
        await r.decide(r.allocation("p", [(0, 1000, 10)]))
        must = [f"{r.gpus[1]}-2" if m == "GPU1-2" else m for m in must]
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=[f"{r.gpus[0]}-0", f"{r.gpus[0]}-1", f"{r.gpus[1]}-0"],
                    must_include_deviceIDs=must,
                    allocation_size=1,
                )
            ]
        )
        async with grpc.aio.insecure_channel(f"unix:{r.settings.plugin_socket}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await pb_grpc.DevicePluginStub(channel).GetPreferredAllocation(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in (info.value.details() or "")
        assert r.metric(BAD, method="GetPreferredAllocation") == 1
