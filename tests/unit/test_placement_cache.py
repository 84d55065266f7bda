"""Placement's per-node cache: a filter never answers from a node picture the ledger has moved past.

Case matrix: usage added / released between calls; inventory replaced; node annotations (cordon)
changed; node removed; a node turning stale while cached, and coming back on a heartbeat that did
not change its devices; a heartbeat that shortens the interval (stale sooner than cached).
"""

from __future__ import annotations

from services.scheduler.fit import Policies
from services.scheduler.ledger import Ledger, NodeInventory
from services.scheduler.placement import STALE_PREFIX, Placement
from services.scheduler.reasons import NODE_UNREGISTERED
from shared import annotations as ann
from shared.model import (
    Allocation,
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodRequest,
    PodUID,
)

N1 = NodeName("node-1")
G0 = DeviceUUID("GPU-0")
MEM = 10_000


def _inventory(*, seen_at: float = 100.0, heartbeat_s: float = 10.0, mem: int = MEM) -> NodeInventory:
    return NodeInventory(
        devices=(DeviceInfo(id=G0, index=0, type="NVIDIA-A100", devmem=mem, count=10),),
        seen_at=seen_at,
        heartbeat_s=heartbeat_s,
    )


def _pod(memreq: int) -> PodRequest:
    return PodRequest(
        namespace="ns",
        name="p",
        uid=PodUID("p"),
        containers=(ContainerSpec(name="c", request=ContainerRequest(nums=1, memreq=memreq, coresreq=10)),),
    )


def _entry(uid: str, mem: int) -> Allocation:
    return Allocation(
        pod_uid=PodUID(uid),
        namespace="ns",
        name=uid,
        node=N1,
        devices=((ContainerDevice(uuid=G0, usedmem=mem, usedcores=10),),),
        containers=("c",),
    )


def _setup() -> tuple[Ledger, Placement]:
    ledger = Ledger()
    ledger.set_inventory(N1, _inventory())
    return ledger, Placement(ledger, Policies())


def test_usage_written_after_a_filter_is_seen_by_the_next_filter() -> None:
    ledger, placement = _setup()
    assert placement.filter(_pod(6000), [N1], 101.0).passed == [N1]
    ledger.apply(_entry("a", 6000), 1)
    out = placement.filter(_pod(6000), [N1], 101.0)
    assert out.passed == [] and "CardInsufficientMemory" in out.failed[N1]
    ledger.delete(PodUID("a"))
    assert placement.filter(_pod(6000), [N1], 101.0).passed == [N1]


def test_a_replaced_inventory_replaces_the_cached_node() -> None:
    ledger, placement = _setup()
    assert placement.filter(_pod(6000), [N1], 101.0).passed == [N1]
    ledger.set_inventory(N1, _inventory(mem=4000))
    assert placement.filter(_pod(6000), [N1], 101.0).passed == []


def test_a_cordon_annotation_is_seen_at_once() -> None:
    ledger, placement = _setup()
    assert placement.filter(_pod(1000), [N1], 101.0).passed == [N1]
    ledger.set_annotations(N1, {ann.DEVICE_CORDON: G0})
    assert "CardCordoned" in placement.filter(_pod(1000), [N1], 101.0).failed[N1]


def test_a_removed_node_is_unregistered_for_the_next_filter() -> None:
    ledger, placement = _setup()
    placement.filter(_pod(1000), [N1], 101.0)
    ledger.remove_node(N1)
    assert placement.filter(_pod(1000), [N1], 101.0).unresolvable == {N1: NODE_UNREGISTERED}


def test_a_cached_node_turns_stale_and_a_heartbeat_brings_it_back() -> None:
    ledger, placement = _setup()
    assert placement.filter(_pod(1000), [N1], 130.0).passed == [N1]
    assert placement.filter(_pod(1000), [N1], 130.1).unresolvable[N1].startswith(STALE_PREFIX)
    ledger.set_inventory(N1, _inventory(seen_at=130.0))  # same devices: no version change
    assert placement.filter(_pod(1000), [N1], 131.0).passed == [N1]


def test_a_shorter_heartbeat_interval_makes_a_cached_node_stale_sooner() -> None:
    ledger, placement = _setup()
    assert placement.filter(_pod(1000), [N1], 101.0).passed == [N1]
    ledger.set_inventory(N1, _inventory(heartbeat_s=1.0))
    assert placement.filter(_pod(1000), [N1], 104.0).unresolvable[N1].startswith(STALE_PREFIX)


def test_scores_and_decide_use_the_same_fresh_picture() -> None:
    ledger, placement = _setup()
    assert placement.decide(_pod(6000), N1, 101.0).fit
    ledger.apply(_entry("a", 6000), 1)
    assert not placement.decide(_pod(6000), N1, 101.0).fit
    assert placement.scores(_pod(1000), [N1, "ghost"], 101.0)[1] == ("ghost", 0)


def test_a_favoured_node_alone_scores_top_and_the_rest_keep_their_order_below_it() -> None:
    ledger, placement = _setup()
    n2 = NodeName("node-2")
    ledger.set_inventory(n2, _inventory())
    ledger.apply(_entry("a", 9000), 1)  # node-1 nearly full: binpack ranks it first
    plain = placement.scores(_pod(500), [N1, n2, "ghost"], 101.0)
    assert plain[0][1] > plain[1][1]
    assert placement.scores(_pod(500), [N1, n2, "ghost"], 101.0, favour=None) == plain
    assert placement.scores(_pod(500), [N1, n2], 101.0, favour="elsewhere") == plain[:2]
    favoured = dict(placement.scores(_pod(500), [N1, n2, "ghost"], 101.0, favour=n2))
    assert favoured[n2] == 10
    assert favoured[N1] == min(plain[0][1], 9) and favoured["ghost"] == 0
