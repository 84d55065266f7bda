"""A leader killed between its decision and the binding leaves a DECIDED entry for a pod the API
server shows unbound, holding the node's handoff slot for its size: no Allocate will ever free it.
The next leader releases it once its first pod list is in, so the node's card is not locked
(found by tests/e2e/test_fault_matrix.py when the slot was a KV lease: every bind to that card
waited 25 s and failed). An entry of a bound pod is kept, and holds the slot until its Allocate
(the case matrix's control).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import create_node, gpu_pod, register_node, scheduler_app, slice_of

from shared.bus import ALLOCATIONS, Bus
from shared.ledger_entries import encode_allocation
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

pytest_plugins = ("scheduler_fixtures",)


def _decided(pod: dict[str, Any], node: str) -> Allocation:
    card = ContainerDevice(uuid=DeviceUUID(f"GPU-{node}-0"), usedmem=1000, usedcores=0)
    return Allocation(pod_uid=PodUID(pod["metadata"]["uid"]), namespace="default",
                      name=pod["metadata"]["name"], node=NodeName(node), devices=((card,),),
                      containers=("c0",),
                      state=AllocationState.DECIDED, decided_at=time.time() - 5)


async def test_a_dead_leaders_half_done_bind_is_undone_by_the_next(
        bus: Bus, kube: Any, api: Any, nats_url: str, tmp_path: Path) -> None:
    await create_node(kube, "n1")
    await register_node(bus, "n1", 1)
    unbound = dict(await kube.create_pod("default", gpu_pod("unbound", slice_of(1000))))
    bound = dict(await kube.create_pod("default", gpu_pod("bound", slice_of(1000))))
    await kube.bind_pod("default", "bound", bound["metadata"]["uid"], "n1", {})
    allocations = await bus.kv(ALLOCATIONS)
    for pod in (unbound, bound):
        await allocations.put(pod["metadata"]["uid"], encode_allocation(_decided(pod, "n1")))
    async with scheduler_app(bus_settings(nats_url), api.write_kubeconfig(tmp_path / "kubeconfig")) as app:
        await wait_until(app.reconciler.pods_synced.is_set, what="pods synced")
        assert app.ledger.entry(PodUID(unbound["metadata"]["uid"])) is None
        assert app.ledger.entry(PodUID(bound["metadata"]["uid"])) is not None
        assert app.slots.holder(NodeName("n1"), 1, PodUID("next")) == bound["metadata"]["uid"]
