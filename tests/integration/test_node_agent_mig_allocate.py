"""MIG through a real node-agent: decision on the bus -> kubelet Allocate over gRPC -> MIG instance.

HAMi v2.10 ``plugin/server.go`` and ``plugin/util.go``: Allocate creates the instance the scheduler
reserved (profile and placement) and hands the container its MIG UUID; ``migmgr.go``: the instance
is destroyed when the pod goes. Cases: one instance per card, two on one card for one container,
the release destroying them, an illegal placement failing the pod with nothing left behind, a
restarted agent adopting the instances the ledger reserves and destroying the others.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from asyncwait import wait_until
from test_node_agent_rig import Rig

from gpubus_local.sim.kubelet import AdmissionError
from services.node_agent.app import NodeAgent
from services.node_agent.simulated import SimulatedSource
from shared.bus import Bus
from shared.events import AllocationApplied, AllocationFailed
from shared.model import Allocation, ContainerDevice, MigPlacement, MigSlice


@contextlib.asynccontextmanager
async def mig_rig(bus: Bus) -> AsyncIterator[Rig]:
    # An A100-80GB in mig mode registers 7 slots (1g has 7 instances): the rig waits for 7 per card.
    r = Rig(bus, spec="2xA100-80GB:mig", device_split_count=7)
    try:
        await r.start()
        yield r
    finally:
        await r.close()


def with_mig(r: Rig, allocation: Allocation, *slices: list[tuple[str, int, int]]) -> Allocation:
    """Give each card of each container a profile at (start, size), in the rig's allocation order."""
    devices = tuple(
        tuple(
            ContainerDevice(
                uuid=d.uuid,
                usedmem=d.usedmem,
                usedcores=d.usedcores,
                idx=d.idx,
                mig=MigSlice(profile=p, placement=MigPlacement(start=s, size=n)),
            )
            for d, (p, s, n) in zip(slot, per_slot, strict=True)
        )
        for slot, per_slot in zip(allocation.devices, slices, strict=True)
    )
    return Allocation(
        pod_uid=allocation.pod_uid,
        namespace=allocation.namespace,
        name=allocation.name,
        node=allocation.node,
        devices=devices,
        containers=allocation.containers,
    )


def source(r: Rig) -> SimulatedSource:
    assert r.agent is not None and isinstance(r.agent.source, SimulatedSource)
    return r.agent.source


async def test_allocate_creates_the_reserved_instance_and_the_release_destroys_it(bus: Bus) -> None:
    async with mig_rig(bus) as r:
        assert r.agent is not None
        registered = r.agent.advertised.snapshot.devices
        assert [(d.mode, d.count, d.devmem) for d in registered] == [("mig", 7, 81920)] * 2
        decision = with_mig(r, r.allocation("infer", [(1, 9728, 15), (1, 9728, 15)]),
                            [("1g.10gb", 6, 1), ("1g.10gb", 5, 1)])
        await r.decide(decision)
        answer = (await r.kubelet.admit(r.pod(decision)))["c0"]
        live = source(r).instances(r.gpus[1])
        assert [(i.profile, i.placement.start) for i in live] == [("1g.10gb", 6), ("1g.10gb", 5)]
        assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": ",".join(i.mig_uuid for i in live)}
        assert answer.mounts == ()
        await wait_until(lambda: len(r.of(AllocationApplied)) == 1, what="allocation.applied")
        assert r.of(AllocationApplied)[0].mig_uuids == tuple(i.mig_uuid for i in live)
        await r.release(decision)
        await wait_until(lambda: source(r).instances(r.gpus[1]) == (), what="instances destroyed")


async def test_an_illegal_placement_fails_the_pod_and_leaves_no_instance(bus: Bus) -> None:
    async with mig_rig(bus) as r:
        decision = with_mig(r, r.allocation("bad", [(0, 9728, 15), (0, 40192, 43)]),
                            [("1g.10gb", 6, 1), ("3g.40gb", 2, 4)])
        await r.decide(decision)
        with pytest.raises(AdmissionError, match=r"invalid placement MigPlacement\(start=2, size=4\)"):
            await r.kubelet.admit(r.pod(decision))
        await wait_until(lambda: len(r.of(AllocationFailed)) == 1, what="allocation.failed")
        assert source(r).instances(r.gpus[0]) == ()
        assert r.metric("gpubus_node_agent_allocations_total", outcome="failed") == 1


async def test_a_restarted_agent_keeps_reserved_instances_and_destroys_orphans(bus: Bus) -> None:
    """HAMi ``plugin/migmgr.go``: after a restart, instances the ledger reserves are adopted (and
    destroyed at release); those no pod holds are destroyed."""
    async with mig_rig(bus) as r:
        await r.stop_agent()
        gpu = r.gpus[0]
        decision = with_mig(r, r.allocation("kept", [(0, 9728, 15)]), [("1g.10gb", 6, 1)])
        await r.decide(decision, event=False)  # in the ledger from before the restart
        cards = SimulatedSource(r.node, r.settings.simulate)  # the hardware outlives the agent
        kept = await cards.create_instance(gpu, "1g.10gb", MigPlacement(start=6, size=1))
        await cards.create_instance(gpu, "3g.40gb", MigPlacement(start=0, size=4))
        r.agent = NodeAgent(r.settings, source=cards, bus=bus)
        await r.agent.start()
        assert cards.instances(gpu) == (kept,)
        await r.release(decision)
        await wait_until(lambda: cards.instances(gpu) == (), what="the adopted instance destroyed")
