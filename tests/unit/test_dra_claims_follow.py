"""DRA mode's allocation.decided: a pod's allocated claims as extender mode's Allocation
(services/scheduler/dra_claims.py) and the leader's follower (dra_follow.py) with fakes at its ports.

Cases: one container, one shared card (memory, cores, the card's UUID from the inventory); several
containers (init first) with their own claims and a container without one; a request-scoped
reference; a card not shared (no consumedCapacity) is the whole card; a device not named by
gpubus or another driver's result ignored; no allocation -> None. Follower: decided once per
change (a repeat of the same claim publishes nothing), a second claim of the pod re-publishes the
whole pod, the last claim's deletion publishes released; a pod that is gone publishes nothing;
a refused list (RBAC not there yet) is tried again instead of ending the scheduler.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from asyncwait import wait_until

from services.scheduler.dra_claims import pod_allocation
from services.scheduler.dra_follow import ClaimFollower, slim
from services.scheduler.ledger import Ledger, NodeInventory
from shared.events import AllocationDecided, AllocationReleased, Event
from shared.kube_errors import KubeRejected
from shared.kube_types import Pod, WatchEvent
from shared.model import DeviceInfo, DeviceUUID, NodeName

NODE = NodeName("node-1")
CARDS = {i: DeviceInfo(id=DeviceUUID(f"GPU-{i}"), index=i, count=10, devmem=81920, devcore=100,
                       type="NVIDIA-A100-SXM4-80GB", numa=0, health=True) for i in range(2)}


def card_of(node: NodeName, index: int) -> DeviceInfo | None:
    return CARDS.get(index) if node == NODE else None


def claim(name: str, *results: dict[str, Any], pod: str = "p", uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"c-{name}", "resourceVersion": "1"},
            "status": {"allocation": {"devices": {"results": list(results)}},
                       "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}}


def result(device: str, memory: str | None = "8Gi", cores: str | None = "20", *, request: str = "gpu",
           driver: str = "gpubus.io") -> dict[str, Any]:
    out: dict[str, Any] = {"request": request, "driver": driver, "pool": NODE, "device": device}
    if memory is not None:
        out["consumedCapacity"] = {"memory": memory, "cores": cores}
    return out


def pod(*containers: tuple[str, list[dict[str, str]]], init: tuple[str, list[dict[str, str]]] | None = None,
        claims: dict[str, str] | None = None) -> dict[str, Any]:
    def spec(c: tuple[str, list[dict[str, str]]]) -> dict[str, Any]:
        return {"name": c[0], "resources": {"claims": c[1]} if c[1] else {}}
    names = claims or {"gpu": "claim-a"}
    return {"metadata": {"namespace": "ns", "name": "p", "uid": "u1"},
            "spec": {"containers": [spec(c) for c in containers],
                     **({"initContainers": [spec(init)]} if init else {}),
                     "resourceClaims": [{"name": k, "resourceClaimTemplateName": "t"} for k in names]},
            "status": {"resourceClaimStatuses": [{"name": k, "resourceClaimName": v}
                                                 for k, v in names.items()]}}


def test_one_container_one_shared_card() -> None:
    a = pod_allocation(pod(("main", [{"name": "gpu"}])), [claim("claim-a", result("gpu-1"))], card_of=card_of)
    assert a is not None
    assert (a.pod_uid, a.namespace, a.name, a.node, a.containers) == ("u1", "ns", "p", NODE, ("main",))
    [[card]] = a.devices
    assert (card.uuid, card.usedmem, card.usedcores, card.idx) == ("GPU-1", 8192, 20, 1)


def test_containers_get_their_own_claims_in_slot_order() -> None:
    the_pod = pod(("a", [{"name": "x"}]), ("cpu", []), ("b", [{"name": "y", "request": "gpu"}]),
                  init=("warm", [{"name": "x"}]), claims={"x": "claim-x", "y": "claim-y"})
    claims = [claim("claim-x", result("gpu-0", "1Gi", "0")),
              claim("claim-y", result("gpu-1", None), result("gpu-0", "2Gi", "5", request="other"))]
    a = pod_allocation(the_pod, claims, card_of=card_of)
    assert a is not None and a.containers == ("warm", "a", "cpu", "b") and a.init_count == 1
    assert [[(d.uuid, d.usedmem, d.usedcores) for d in slot] for slot in a.devices] == [
        [("GPU-0", 1024, 0)], [("GPU-0", 1024, 0)], [], [("GPU-1", 81920, 100)]]


def test_foreign_results_and_unallocated_claims_give_nothing() -> None:
    the_pod = pod(("main", [{"name": "gpu"}]))
    foreign = claim("claim-a", result("gpu-0", driver="gpu.nvidia.com"), result("mig-1g"))
    assert pod_allocation(the_pod, [foreign], card_of=card_of) is None
    assert pod_allocation(the_pod, [{**claim("claim-a"), "status": {}}], card_of=card_of) is None


class FakeApi:
    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods

    async def list_resource_claims(self) -> tuple[list[dict[str, Any]], str]:
        return [], "1"

    def watch_resource_claims(self, resource_version: str) -> AsyncIterator[WatchEvent]:
        raise NotImplementedError

    async def get_pod(self, namespace: str, name: str) -> Pod | None:
        return self.pods.get(name)  # type: ignore[return-value]


class Published:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> None:
        self.events.append(event)


def follower(pods: dict[str, dict[str, Any]]) -> tuple[ClaimFollower, Published]:
    ledger = Ledger()
    ledger.set_inventory(NODE, NodeInventory(devices=tuple(CARDS.values()), seen_at=0.0))
    bus = Published()
    return ClaimFollower(FakeApi(pods), bus, ledger, clock=lambda: 5.0), bus


async def test_follower_publishes_each_change_of_a_pod_once_then_its_release() -> None:
    the_pod = pod(("a", [{"name": "x"}]), ("b", [{"name": "y"}]), claims={"x": "claim-x", "y": "claim-y"})
    f, bus = follower({"p": the_pod})
    x, y = claim("claim-x", result("gpu-0")), claim("claim-y", result("gpu-1", "1Gi", "10"))
    await f.on_claim("ADDED", slim(x))
    await f.on_claim("MODIFIED", slim(x))  # same allocation: nothing new
    await f.on_claim("ADDED", slim(y))
    decided = [e for e in bus.events if isinstance(e, AllocationDecided)]
    assert len(decided) == 2 and decided[1].node == NODE
    assert [[d.uuid for d in slot] for slot in decided[1].allocation.devices] == [["GPU-0"], ["GPU-1"]]
    assert decided[1].allocation.decided_at == 5.0
    await f.on_claim("DELETED", slim(x))
    assert isinstance(bus.events[-1], AllocationDecided)  # y still holds a card
    await f.on_claim("DELETED", slim(y))
    released = bus.events[-1]
    assert isinstance(released, AllocationReleased)
    assert (released.pod_uid, released.namespace, released.name, released.node) == ("u1", "ns", "p", NODE)
    assert len(bus.events) == 4


async def test_follower_ignores_a_pod_that_is_gone() -> None:
    f, bus = follower({})
    await f.on_claim("ADDED", slim(claim("claim-a", result("gpu-0"))))
    await f.on_claim("DELETED", slim(claim("claim-a", result("gpu-0"))))
    assert bus.events == []


class RefusedFirst(FakeApi):
    """Lists are refused (403) twice, then answer one allocated claim; the watch then idles."""

    def __init__(self, pods: dict[str, dict[str, Any]], claims: list[dict[str, Any]]) -> None:
        super().__init__(pods)
        self.claims, self.lists = claims, 0

    async def list_resource_claims(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        if self.lists <= 2:
            raise KubeRejected("resourceclaims.resource.k8s.io is forbidden", code=403)
        return self.claims, "1"

    async def watch_resource_claims(self, resource_version: str) -> AsyncIterator[WatchEvent]:  # type: ignore[override]
        await asyncio.Event().wait()
        yield {"type": "BOOKMARK", "object": {}}


async def test_a_refused_list_is_tried_again() -> None:
    ledger = Ledger()
    bus = Published()
    api = RefusedFirst({"p": pod(("main", [{"name": "gpu"}]))}, [claim("claim-a", result("gpu-0"))])
    task = asyncio.create_task(ClaimFollower(api, bus, ledger, retry_s=0.01).run())
    try:
        await wait_until(lambda: bool(bus.events), 10, what="allocation.decided after two refusals")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert api.lists == 3 and isinstance(bus.events[0], AllocationDecided)
