"""One event of every catalogued kind per node, with every optional shape filled in (a MIG slice,
a None request, maps, nested lists): what the contract and consumer tests publish and validate."""

from __future__ import annotations

from shared.events import (
    AllocationApplied,
    AllocationDecided,
    AllocationFailed,
    AllocationMismatch,
    AllocationReleased,
    ContainerUsage,
    DeviceHealth,
    DeviceSample,
    Event,
    Inventory,
    PodAdmitted,
    PodPreempted,
    PodRejected,
    PodUnschedulable,
    Usage,
    UsageOverLimit,
)
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUUID,
    MigPlacement,
    MigProfile,
    MigSlice,
    NodeName,
    PodUID,
)


def allocation(node: str, uid: str, mem: int) -> Allocation:
    plain = ContainerDevice(uuid=DeviceUUID(f"GPU-{node}-0"), usedmem=mem, usedcores=30, idx=0)
    mig = ContainerDevice(uuid=DeviceUUID(f"GPU-{node}-1"), usedmem=10240, usedcores=15, idx=1,
                          mig=MigSlice(profile="1g.10gb", placement=MigPlacement(start=2, size=1)))
    return Allocation(pod_uid=PodUID(uid), namespace="team", name=f"job-{uid}", node=NodeName(node),
                      devices=((), (plain, mig)), containers=("init", "main"), init_count=1,
                      state=AllocationState.DECIDED, decided_at=1_700_000_000.5)


def inventory(node: str, generation: int = 1) -> Inventory:
    profile = MigProfile(name="1g.10gb", memory_mb=9856, core=15, slice_count=1,
                         placements=(MigPlacement(start=0, size=1), MigPlacement(start=1, size=1)))
    devices = (
        DeviceInfo(id=DeviceUUID(f"GPU-{node}-0"), index=0, type="NVIDIA-A100-SXM4-80GB", devmem=81920),
        DeviceInfo(id=DeviceUUID(f"GPU-{node}-1"), index=1, type="NVIDIA-A100-SXM4-80GB", devmem=81920,
                   mode="mig", mig_profiles=(profile,)),
    )
    return Inventory(devices=devices, generation=generation, node=node, source=f"node-agent/{node}")


def node_events(node: str) -> list[Event]:
    """Every kind once, about ``node`` (pod-scoped kinds name a pod placed there)."""
    uid = f"uid-{node}"
    return [
        inventory(node),
        PodAdmitted(namespace="team", name=f"job-{uid}", uid=uid, node=node, scheduler_name="gpubus",
                    requests=(None, ContainerRequest(nums=2, memreq=3000, coresreq=30)),
                    mutations=("/spec/schedulerName",)),
        PodRejected(namespace="team", name=f"bad-{uid}", reason="nvidia.com/gpumem: bad quantity", node=node),
        PodUnschedulable(namespace="team", name=f"big-{uid}", uid=f"big-{uid}", node=node,
                         reasons={node: "2/2 CardInsufficientMemory"}),
        PodPreempted(namespace="team", name=f"batch-{uid}", uid=f"batch-{uid}", priority=100, node=node,
                     beneficiary_namespace="team", beneficiary_name=f"big-{uid}",
                     beneficiary_uid=f"big-{uid}", beneficiary_priority=1000, card=f"GPU-{node}-0",
                     reason=f"{node}: 2/2 CardInsufficientMemory"),
        AllocationDecided(allocation=allocation(node, uid, 3000), node=node, leases={f"alloc.{node}.2": 7}),
        AllocationApplied(pod_uid=uid, namespace="team", name=f"job-{uid}", container="main", node=node,
                          device_ids=(f"GPU-{node}-0-1", f"GPU-{node}-1-0"), complete=True,
                          mig_uuids=(f"MIG-{node}",)),
        AllocationFailed(pod_uid=uid, namespace="team", name=f"job-{uid}", reason="no such device",
                         node=node),
        AllocationMismatch(pod_uid=uid, namespace="team", name=f"job-{uid}", container="main", node=node,
                           expected=(f"GPU-{node}-0-1",), actual=(f"GPU-{node}-0-2",)),
        DeviceHealth(uuid=f"GPU-{node}-0", healthy=False, reason="Xid 79", node=node),
        Usage(node=node,
              containers=(ContainerUsage(namespace="team", pod=f"job-{uid}", pod_uid=uid, container="main",
                                         devices=(DeviceSample(uuid=f"GPU-{node}-0", used_bytes=1 << 30,
                                                               limit_bytes=3000 << 20, utilization=0.5),)),),
              host=(DeviceSample(uuid=f"GPU-{node}-0", used_bytes=(1 << 30) + 5),)),
        UsageOverLimit(namespace="team", pod=f"job-{uid}", pod_uid=uid, container="main", node=node,
                       uuid=f"GPU-{node}-0", used_bytes=4000 << 20, limit_bytes=3000 << 20),
        AllocationReleased(pod_uid=uid, namespace="team", name=f"job-{uid}", why="deleted", node=node),
    ]
