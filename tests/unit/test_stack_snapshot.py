"""``gpubus snapshot``: inventory + ledger -> the CLUSTER.json ``gpubus explain`` reads."""

from __future__ import annotations

from gpubus.snapshot import cluster_json
from services.scheduler.explain import load_cluster
from shared.events import Inventory
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodUID,
)


def alloc(uid: str, mem: int, state: AllocationState = AllocationState.APPLIED) -> Allocation:
    card = ContainerDevice(uuid=DeviceUUID("GPU-a"), usedmem=mem, usedcores=30)
    return Allocation(pod_uid=PodUID(uid), namespace="ns", name=uid, node=NodeName("n1"), devices=((card,),),
                      containers=("c",), state=state)


def test_usage_is_summed_from_live_ledger_entries_and_failed_ones_hold_nothing() -> None:
    inv = Inventory(node="n1", devices=(DeviceInfo(id=DeviceUUID("GPU-a"), type="NVIDIA-A100", devmem=81920),
                                        DeviceInfo(id=DeviceUUID("GPU-b"), index=1, type="NVIDIA-A100",
                                                   devmem=81920)))
    data = cluster_json([inv], [alloc("p", 3000), alloc("q", 5000), alloc("r", 9999, AllocationState.FAILED)])
    a, b = data["nodes"][0]["devices"]
    assert (a["used"], a["usedmem"], a["usedcores"]) == (2, 8000, 60)
    assert (b["used"], b["usedmem"], b["usedcores"]) == (0, 0, 0)
    assert [n.name for n in load_cluster(data)] == ["n1"]  # what explain accepts
