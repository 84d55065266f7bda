"""Events for the dashboard's tests: a node's inventory, a pod's life, usage, garbage."""

from __future__ import annotations

from shared.events import (
    AllocationApplied,
    AllocationDecided,
    AllocationReleased,
    ContainerUsage,
    DeviceSample,
    Inventory,
    PodAdmitted,
    PodUnschedulable,
    Usage,
)
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodUID,
)

MIB = 1 << 20


def card_id(node: str, i: int) -> str:
    return f"GPU-{node}-{i}"


def inventory(node: str, cards: int = 2, *, ts: float = 1000.0, devmem: int = 81920, generation: int = 1,
              unhealthy: int | None = None) -> Inventory:
    devices = tuple(DeviceInfo(id=DeviceUUID(card_id(node, i)), index=i, type="NVIDIA-A100-SXM4-80GB",
                               devmem=devmem, numa=i % 2, count=10, health=i != unhealthy)
                    for i in range(cards))
    return Inventory(node=node, devices=devices, ts=ts, generation=generation)


def allocation(name: str, node: str, card: int = 0, *, mem: int = 2000, cores: int = 10, uid: str = "",
               state: AllocationState = AllocationState.DECIDED, ns: str = "default") -> Allocation:
    return Allocation(pod_uid=PodUID(uid or f"uid-{name}"), namespace=ns, name=name, node=NodeName(node),
                      devices=((ContainerDevice(uuid=DeviceUUID(card_id(node, card)), usedmem=mem,
                                                usedcores=cores, idx=card),),),
                      containers=("main",), state=state)


def decided(name: str, node: str, card: int = 0, *, ts: float = 1001.0, **kw: object) -> AllocationDecided:
    return AllocationDecided(allocation=allocation(name, node, card, **kw), node=node, ts=ts)  # type: ignore[arg-type]


def applied(name: str, node: str, *, ts: float = 1002.0, uid: str = "") -> AllocationApplied:
    return AllocationApplied(pod_uid=uid or f"uid-{name}", namespace="default", name=name, container="main",
                             device_ids=(f"{card_id(node, 0)}-0",), complete=True, node=node, ts=ts)


def released(name: str, node: str, *, ts: float = 1003.0, uid: str = "",
             why: str = "deleted") -> AllocationReleased:
    return AllocationReleased(pod_uid=uid or f"uid-{name}", namespace="default", name=name, why=why,
                              node=node, ts=ts)


def admitted(name: str, *, ts: float = 1000.5, mem: int = 2000) -> PodAdmitted:
    return PodAdmitted(namespace="default", name=name, requests=(ContainerRequest(nums=1, memreq=mem,
                                                                                  coresreq=10),), ts=ts)


def unschedulable(name: str, reasons: dict[str, str], *, ts: float = 1001.0) -> PodUnschedulable:
    return PodUnschedulable(namespace="default", name=name, uid=f"uid-{name}", reasons=reasons, ts=ts)


def usage(node: str, name: str, used_mib: int, *, card: int = 0, ts: float = 1004.0,
          util: float = 0.0) -> Usage:
    sample = DeviceSample(uuid=card_id(node, card), used_bytes=used_mib * MIB, limit_bytes=2000 * MIB,
                          utilization=util)
    container = ContainerUsage(namespace="default", pod=name, pod_uid=f"uid-{name}", container="main",
                               devices=(sample,))
    return Usage(node=node, ts=ts, containers=(container,))
