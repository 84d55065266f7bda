"""The Allocate handoff end to end on one node: decision on the bus -> kubelet Allocate -> events.

Cases: 1 and N devices; init + app + GPU-less containers (kubelet device reuse); the env and
mount set; no decision, count mismatch, released (stale) decision; two pending pods of
different sizes never swap limits; same-size pods decided one after the other (the scheduler
serializes them) each get their own; a decision naming Allocate leases (an older scheduler's)
is served and nothing is written to the ``locks`` bucket; a kubelet that ignores the preference
gets the decided GPUs and a mismatch event; verification against the pod resources API.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import grpc
import pytest
from asyncwait import wait_until
from test_node_agent_rig import Rig, rig

from gpubus_local.sim.kubelet import AdmissionError
from services.node_agent.inventory import physical_uuid
from shared.bus import Bus
from shared.events import AllocationApplied, AllocationFailed, AllocationMismatch


def limits(envs: dict[str, str]) -> tuple[str, ...]:
    return tuple(envs[k] for k in sorted(envs) if k.startswith("CUDA_DEVICE_MEMORY_LIMIT_"))


async def test_one_device_pod_gets_its_decided_gpu_and_limits(bus: Bus) -> None:
    async with rig(bus) as r:
        decision = r.allocation("web", [(1, 3000, 30)])
        await r.decide(decision)
        answer = (await r.kubelet.admit(r.pod(decision)))["c0"]
        assert physical_uuid(answer.device_ids[0]) == r.gpus[1]
        hook = r.settings.hook_path
        assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == r.gpus[1]
        assert (answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], answer.envs["CUDA_DEVICE_SM_LIMIT"]) == (
            "3000m",
            "30",
        )
        assert answer.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith(f"{hook}/vgpu/")
        cache = f"{hook}/vgpu/containers/{decision.pod_uid}_c0"
        assert answer.mounts == (
            (f"{hook}/vgpu/libvgpu.so", f"{hook}/vgpu/libvgpu.so", True),
            (f"{hook}/vgpu", cache, False),
            ("/tmp/vgpulock", "/tmp/vgpulock", False),
            ("/etc/ld.so.preload", f"{hook}/vgpu/ld.so.preload", True),
        )
        assert os.stat(cache).st_mode & 0o40777 == 0o40777  # a directory, writable by any container uid
        await wait_until(lambda: len(r.of(AllocationApplied)) == 1, what="allocation.applied")
        applied = r.of(AllocationApplied)[0]
        assert (applied.pod_uid, applied.container, applied.complete) == (decision.pod_uid, "c0", True)
        assert applied.device_ids == answer.device_ids
        assert r.metric("gpubus_node_agent_allocations_total", outcome="applied") == 1
        assert r.metric("gpubus_node_agent_allocate_handler_seconds_count") == 1


async def test_multi_container_pod_reuses_init_devices_and_gets_limits_per_container(bus: Bus) -> None:
    async with rig(bus) as r:
        decision = r.allocation("job", [(0, 1000, 10)], [], [(0, 2000, 20), (1, 4000, 40)], init_count=1)
        await r.decide(decision)
        answers = await r.kubelet.admit(r.pod(decision, init_count=1))
        assert set(answers) == {"c0", "c2"}
        assert answers["c0"].envs["NVIDIA_VISIBLE_DEVICES"] == r.gpus[0]
        assert limits(answers["c0"].envs) == ("1000m",)
        assert answers["c2"].envs["NVIDIA_VISIBLE_DEVICES"] == f"{r.gpus[0]},{r.gpus[1]}"
        assert limits(answers["c2"].envs) == ("2000m", "4000m")
        assert answers["c2"].envs["CUDA_DEVICE_SM_LIMIT"] == "20"
        assert answers["c0"].device_ids[0] in answers["c2"].device_ids  # kubelet reused the init device
        await wait_until(
            lambda: [e.complete for e in r.of(AllocationApplied)] == [False, True], what="applied x2"
        )
        await wait_until(
            lambda: r.metric("gpubus_node_agent_verifications_total", result="ok") == 1,
            what="pod resources verification",
        )
        assert not r.of(AllocationMismatch)


async def test_allocate_without_a_decision_fails_with_a_clear_reason(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        decision = r.allocation("orphan", [(0, 1000, 10)])
        with pytest.raises(AdmissionError, match="no allocation decided for this node") as info:
            await r.kubelet.admit(r.pod(decision))
        assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
        await wait_until(lambda: len(r.of(AllocationFailed)) == 1, what="allocation.failed")
        assert r.of(AllocationFailed)[0].reason == "no allocation decided for this node (waited 0.2 s for it)"
        assert r.metric("gpubus_node_agent_allocations_total", outcome="no_decision") == 1


async def test_device_count_mismatch_names_the_pod(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        decision = r.allocation("small", [(0, 1000, 10)])
        await r.decide(decision)
        bigger = r.allocation("small", [(0, 1, 1), (1, 1, 1)])
        with pytest.raises(
            AdmissionError, match="device count 2 does not match the decision 1 for pod ns/small"
        ):
            await r.kubelet.admit(r.pod(bigger))
        assert r.metric("gpubus_node_agent_allocations_total", outcome="mismatch") == 1


async def test_a_released_decision_is_never_served(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        decision = r.allocation("gone", [(0, 1000, 10)])
        await r.decide(decision)
        assert r.agent is not None
        agent = r.agent
        await wait_until(lambda: decision.pod_uid in agent.handoff.table, what="decision cached")
        await r.release(decision)
        await wait_until(lambda: decision.pod_uid not in agent.handoff.table, what="decision dropped")
        with pytest.raises(AdmissionError, match="no allocation decided"):
            await r.kubelet.admit(r.pod(decision))


async def test_a_decision_arriving_during_allocate_is_awaited(bus: Bus) -> None:
    async with rig(bus) as r:
        decision = r.allocation("late", [(1, 1500, 15)])
        admission = asyncio.create_task(r.kubelet.admit(r.pod(decision)))
        assert r.agent is not None
        agent = r.agent
        await wait_until(lambda: agent.handoff.waiting == 1, what="kubelet call waiting for a decision")
        await r.decide(decision)
        answer = (await admission)["c0"]
        assert limits(answer.envs) == ("1500m",)


async def test_two_pending_pods_of_different_sizes_never_swap_limits(bus: Bus) -> None:
    async with rig(bus) as r:
        one = r.allocation("one", [(0, 1111, 11)])
        two = r.allocation("two", [(0, 2222, 22), (1, 2222, 22)])
        await r.decide(one)
        await r.decide(two)
        answers = await asyncio.gather(r.kubelet.admit(r.pod(two)), r.kubelet.admit(r.pod(one)))
        assert limits(answers[0]["c0"].envs) == ("2222m", "2222m")
        assert limits(answers[1]["c0"].envs) == ("1111m",)
        assert answers[1]["c0"].envs["CUDA_DEVICE_SM_LIMIT"] == "11"


async def test_same_size_pods_decided_one_after_the_other_each_get_their_own(bus: Bus) -> None:
    async with rig(bus) as r:
        first = r.allocation("first", [(0, 1000, 10)])
        second = r.allocation("second", [(0, 3000, 30)])
        await r.decide(first)
        answer_first = await r.kubelet.admit(r.pod(first))
        await r.decide(second)  # the scheduler decides it once the first is allocated
        answer_second = await r.kubelet.admit(r.pod(second))
        assert limits(answer_first["c0"].envs) == ("1000m",)
        assert limits(answer_second["c0"].envs) == ("3000m",)


async def test_a_decision_naming_leases_is_served_and_nothing_is_written_to_the_locks_bucket(
        bus: Bus) -> None:
    """Decisions of a scheduler from before issue 32 named the Allocate leases it held; the field
    still decodes, and is ignored."""
    async with rig(bus) as r:
        named = r.allocation("named", [(0, 1000, 10)])
        writes: list[str] = []

        async def on_msg(msg: Any) -> None:
            writes.append(msg.subject)

        sub = await bus.nc.subscribe("$KV.locks.alloc.>", cb=on_msg)
        await bus.nc.flush()
        await r.decide(named, leases={f"alloc.{r.node}.1": 7})
        answer = await r.kubelet.admit(r.pod(named))
        assert limits(answer["c0"].envs) == ("1000m",)
        await wait_until(lambda: len(r.of(AllocationApplied)) == 1, what="allocation.applied")
        await bus.nc.flush()
        await sub.unsubscribe()
        assert writes == []
async def test_same_size_pods_pending_together_are_refused_not_swapped(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.2) as r:
        await r.decide(r.allocation("a", [(0, 1000, 10)]))
        await r.decide(r.allocation("b", [(1, 3000, 30)]))
        assert r.agent is not None
        agent = r.agent
        await wait_until(lambda: len(agent.handoff.table) == 2, what="both pending")
        with pytest.raises(AdmissionError, match="ambiguous Allocate of 1 devices: pods ns/a, ns/b") as info:
            await r.kubelet.admit(r.pod(r.allocation("a", [(0, 1, 1)])))
        assert info.value.code == grpc.StatusCode.ABORTED
        assert r.metric("gpubus_node_agent_allocations_total", outcome="ambiguous") == 1


async def test_kubelet_ignoring_the_preference_gets_the_decided_gpu_and_a_mismatch_event(bus: Bus) -> None:
    async with rig(bus, honor_preferred=False) as r:
        kubelets_pick = physical_uuid(sorted(r.kubelet.devices())[0])
        decided = next(i for i, gpu in enumerate(r.gpus) if gpu != kubelets_pick)
        decision = r.allocation("stubborn", [(decided, 2000, 20)])
        await r.decide(decision)
        answer = (await r.kubelet.admit(r.pod(decision)))["c0"]
        assert physical_uuid(answer.device_ids[0]) == kubelets_pick
        assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == r.gpus[decided]  # the decision wins
        assert r.metric("gpubus_node_agent_allocation_mismatches_total", where="allocate") == 1
        await wait_until(lambda: len(r.of(AllocationMismatch)) == 1, what="allocation.mismatch")
        mismatch = r.of(AllocationMismatch)[0]
        assert (mismatch.container, mismatch.expected, mismatch.actual) == (
            "c0",
            (r.gpus[decided],),
            (kubelets_pick,),
        )
        assert r.metric("gpubus_node_agent_allocation_mismatches_total", where="pod_resources") == 1


async def test_unwritable_hook_path_fails_the_allocate_and_frees_the_pod(bus: Bus) -> None:
    r = Rig(bus)
    await asyncio.to_thread(Path(r.settings.hook_path).write_text, "not a directory")
    try:
        await r.start()
        await r.kubelet.wait_for(lambda: len(r.kubelet.devices()) == 8)
        decision = r.allocation("nodir", [(0, 1000, 10)])
        await r.decide(decision)
        with pytest.raises(AdmissionError, match="cannot create the HAMi-core cache directory") as info:
            await r.kubelet.admit(r.pod(decision))
        assert info.value.code == grpc.StatusCode.INTERNAL
        await wait_until(lambda: len(r.of(AllocationFailed)) == 1, what="allocation.failed")
        assert r.of(AllocationFailed)[0].pod_uid == decision.pod_uid
    finally:
        await r.close()
