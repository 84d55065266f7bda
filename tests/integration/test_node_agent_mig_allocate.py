"""MIG through a real node-agent: decision on the bus -> kubelet Allocate over gRPC -> MIG instance.

HAMi v2.10 ``plugin/server.go`` and ``plugin/util.go``: Allocate creates the instance the scheduler
reserved (profile and placement) and hands the container its MIG UUID; ``migmgr.go``: the instance
is destroyed when the pod goes. Cases: one instance per card, two on one card for one container,
the release destroying them, a placement the card does not offer and a container mixing MIG and
shared cards refused on arrival (:mod:`shared.allocation_rules`), a placement the card cannot make
now failing the pod with nothing left behind, a restarted agent adopting the instances the ledger
reserves and destroying the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asyncwait import wait_until
from test_node_agent_rig import Rig

from gpubus_local.sim.kubelet import AdmissionError
from services.node_agent.app import NodeAgent
from services.node_agent.simulated import SimulatedSource
from shared.allocation_rules import MIXED_KINDS
from shared.bus import Bus
from shared.events import AllocationApplied, AllocationFailed
from shared.model import Allocation, ContainerDevice, MigPlacement, MigSlice


@contextlib.asynccontextmanager
async def mig_rig(bus: Bus, spec: str = "2xA100-80GB:mig", **overrides: Any) -> AsyncIterator[Rig]:
    # An A100-80GB in mig mode registers 7 slots (1g has 7 instances): the rig waits for 7 per card.
    r = Rig(bus, spec=spec, device_split_count=7, **overrides)
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


async def test_a_placement_the_card_does_not_offer_is_refused_on_arrival(bus: Bus) -> None:
    """3g.40gb sits at slice 0 or 4 only: the decision breaks :mod:`shared.allocation_rules` and is
    refused before the kubelet calls, counted, with no instance made."""
    async with mig_rig(bus, allocate_wait_s=0.2) as r:
        decision = with_mig(r, r.allocation("bad", [(0, 9728, 15), (0, 40192, 43)]),
                            [("1g.10gb", 6, 1), ("3g.40gb", 2, 4)])
        await r.decide(decision)
        await wait_until(lambda: len(r.of(AllocationFailed)) == 1, what="allocation.failed")
        assert "MIG profile 3g.40gb cannot be placed at slice 2" in r.of(AllocationFailed)[0].reason
        assert r.metric("gpubus_node_agent_bad_requests_total", method="allocation_event") == 1
        with pytest.raises(AdmissionError, match="no allocation decided for this node"):
            await r.kubelet.admit(r.pod(decision))
        assert source(r).instances(r.gpus[0]) == ()


async def test_a_placement_the_card_cannot_make_now_fails_the_pod_and_leaves_no_instance(bus: Bus) -> None:
    """A legal decision the card refuses at Allocate (an instance nobody reserved holds slice 0):
    the 1g instance made first is destroyed again, the pod fails."""
    async with mig_rig(bus) as r:
        squatter = await source(r).create_instance(r.gpus[0], "3g.40gb", MigPlacement(start=0, size=4))
        decision = with_mig(r, r.allocation("bad", [(0, 9728, 15), (0, 40192, 43)]),
                            [("1g.10gb", 6, 1), ("3g.40gb", 0, 4)])
        await r.decide(decision)
        with pytest.raises(AdmissionError, match="Insufficient Resources"):
            await r.kubelet.admit(r.pod(decision))
        await wait_until(lambda: len(r.of(AllocationFailed)) == 1, what="allocation.failed")
        assert source(r).instances(r.gpus[0]) == (squatter,)
        assert r.metric("gpubus_node_agent_allocations_total", outcome="failed") == 1


async def test_a_container_given_a_mig_instance_and_a_shared_card_is_refused_on_arrival(bus: Bus) -> None:
    """The decision the scheduler once made for HAMi's documented pod on a mixed node: the node-agent
    refuses it by the rule Fit follows, before the kubelet calls."""
    async with mig_rig(bus, spec="A100-80GB:mig+A100-80GB", allocate_wait_s=0.2) as r:
        mig = with_mig(r, r.allocation("mixed", [(0, 80640, 100)]), [("7g.79gb", 0, 8)]).devices[0][0]
        shared = r.allocation("mixed", [(1, 40960, 30)]).devices[0][0]
        decision = dataclasses.replace(r.allocation("mixed", [(0, 1, 1)]), devices=((mig, shared),))
        await r.decide(decision)
        await wait_until(lambda: len(r.of(AllocationFailed)) == 1, what="allocation.failed")
        assert r.of(AllocationFailed)[0].reason == (
            f"decision refused by the node-agent: container c0: {MIXED_KINDS}"
        )
        with pytest.raises(AdmissionError, match="no allocation decided for this node"):
            await r.kubelet.admit(r.pod(decision))
        assert source(r).instances(r.gpus[0]) == ()


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
        await r.enter(NodeAgent(r.settings, source=cards, bus=bus))
        assert cards.instances(gpu) == (kept,)
        await r.release(decision)
        await wait_until(lambda: cards.instances(gpu) == (), what="the adopted instance destroyed")
