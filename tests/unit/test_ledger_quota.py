"""ResourceQuota at the scheduler: parsing, the namespace usage the ledger keeps, Fit's verdict.

Case matrix:
- parsing: memory and cores keys; other resources and ``requests.`` keys ignored; the tightest of
  several objects wins; configured resource names; a non-integer limit is listed, not raised;
- ledger: namespace usage sums app containers, takes the max of init containers (HAMi collapse),
  ignores FAILED entries, counts reservations, and drops to zero on release;
- placement: a pod over the memory quota fails every node with ``ResourceQuotaNotFit`` (filter and
  decide); a pod's own entry does not count against it; memoryFactor scales the limit; an explicit
  0 blocks; a cores quota; no quota keeps the fast path's answer;
(the cache in front of the API is tests/unit/test_quota.py's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from services.scheduler.fit import Policies
from services.scheduler.ledger import Ledger, NodeInventory
from services.scheduler.placement import Placement
from services.scheduler.quota import NO_QUOTA, NamespaceQuota, namespace_quota
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    ContainerRequest,
    ContainerSpec,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodRequest,
    PodUID,
)
from shared.quota import parse_resource_quotas
from shared.requests import DEFAULT_NAMES, ResourceNames

NODES = (NodeName("n1"), NodeName("n2"))
MEM = 80_000


def parse_quotas(items: list[dict[str, object]], names: ResourceNames) -> NamespaceQuota:
    return namespace_quota(parse_resource_quotas(items, names), names=names)


def gpumem(limit: object, name: str = "q") -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"hard": {"limits.nvidia.com/gpumem": limit}}}


def entry(uid: str, *slots: int, init: int = 0, ns: str = "team", node: NodeName = NODES[0]) -> Allocation:
    return Allocation(
        pod_uid=PodUID(uid),
        namespace=ns,
        name=uid,
        node=node,
        devices=tuple(
            (ContainerDevice(uuid=DeviceUUID(f"GPU-{node}-0"), usedmem=m, usedcores=10),) for m in slots
        ),
        containers=tuple(f"c{i}" for i in range(len(slots))),
        init_count=init,
    )


def pod(uid: str, mem: int, *, nums: int = 1, cores: int = 0, ns: str = "team") -> PodRequest:
    req = ContainerRequest(nums=nums, memreq=mem, coresreq=cores)
    return PodRequest(
        namespace=ns, name=uid, uid=PodUID(uid), containers=(ContainerSpec(name="c", request=req),)
    )


def placement(limits: Mapping[str, NamespaceQuota], *, factor: int = 1) -> tuple[Ledger, Placement]:
    ledger = Ledger()
    for node in NODES:
        devices = tuple(
            DeviceInfo(id=DeviceUUID(f"GPU-{node}-{i}"), index=i, type="NVIDIA-A100", devmem=MEM, count=10)
            for i in range(2)
        )
        ledger.set_inventory(node, NodeInventory(devices=devices, seen_at=0.0, heartbeat_s=0.0))
    return ledger, Placement(
        ledger, Policies(), quotas=lambda ns: limits.get(ns, NO_QUOTA), memory_factor=factor
    )


# --- parsing --------------------------------------------------------------------------------


def test_memory_and_cores_limits_are_read_and_other_keys_ignored() -> None:
    q = parse_quotas(
        [
            {
                "metadata": {"name": "gpu"},
                "spec": {
                    "hard": {
                        "limits.nvidia.com/gpumem": "10000",
                        "limits.nvidia.com/gpucores": 200,
                        "requests.nvidia.com/gpumem": "1",
                        "limits.cpu": "4",
                    }
                },
            }
        ],
        DEFAULT_NAMES,
    )
    assert q.memory is not None and (q.memory.resource, q.memory.hard, q.memory.quota) == (
        "nvidia.com/gpumem",
        10_000,
        "gpu",
    )
    assert q.cores is not None and q.cores.hard == 200


def test_the_tightest_of_several_quota_objects_decides() -> None:
    q = parse_quotas([gpumem("9000", "a"), gpumem("3k", "b"), gpumem("5000", "c")], DEFAULT_NAMES)
    assert q.memory is not None and (q.memory.hard, q.memory.quota) == (3000, "b")


def test_configured_resource_names_are_the_ones_read() -> None:
    names = ResourceNames(memory="example.com/vmem", cores="example.com/vcores")
    q = parse_quotas([gpumem("100"), {"spec": {"hard": {"limits.example.com/vmem": "7"}}}], names)
    assert q.memory is not None and q.memory.hard == 7 and q.cores is None


@pytest.mark.parametrize("bad", ["lots", "1.5", True, None, [], "-"])
def test_a_limit_that_is_not_an_integer_is_listed_not_raised(bad: object) -> None:
    items: list[dict[str, object]] = [gpumem(bad, "broken"), {"spec": "nonsense"}, {"metadata": 3}]
    parsed = parse_resource_quotas(items, DEFAULT_NAMES)
    assert parsed.invalid == (f"broken: limits.nvidia.com/gpumem={bad!r}",)
    assert not namespace_quota(parsed, names=DEFAULT_NAMES).enforced


# --- the ledger's namespace usage ------------------------------------------------------------


def test_namespace_usage_collapses_init_containers_like_hami() -> None:
    ledger = Ledger()
    ledger.apply(entry("a", 3000, 5000, 1000, 2000, init=2), 1)  # init max 5000, apps 1000 + 2000
    ledger.apply(entry("b", 4000), 2)
    ledger.apply(entry("other", 9999, ns="elsewhere"), 3)
    assert ledger.namespace_usage("team") == (5000 + 4000, 20 + 10)
    assert ledger.pod_usage(PodUID("a")) == (5000, 20)
    assert sorted(ledger.namespaces()) == ["elsewhere", "team"]


def test_failed_entries_hold_nothing_and_released_ones_give_it_back() -> None:
    ledger = Ledger()
    ledger.apply(entry("a", 4000), 1)
    ledger.reserve(entry("r", 1000), expires_at=10.0)
    ledger.apply(replace(entry("f", 8000), state=AllocationState.FAILED), 2)
    assert ledger.namespace_usage("team") == (5000, 20)
    ledger.delete(PodUID("a"))
    ledger.expire(now=10.0)
    assert ledger.namespace_usage("team") == (0, 0) and ledger.namespaces() == []


# --- Fit with the quota ---------------------------------------------------------------------


def test_a_pod_over_the_memory_quota_fails_every_node_with_resource_quota_not_fit() -> None:
    ledger, place = placement({"team": parse_quotas([gpumem(10_000)], DEFAULT_NAMES)})
    ledger.apply(entry("a", 4000, 4000), 1)
    out = place.filter(pod("b", 2500), list(NODES), now=0.0)
    assert out.passed == []
    assert out.failed == {"n1": "2/2 ResourceQuotaNotFit", "n2": "2/2 ResourceQuotaNotFit"}
    assert out.reason_counts == {"ResourceQuotaNotFit": 2}
    assert "ResourceQuotaNotFit" in place.decide(pod("b", 2500), NODES[1], now=0.0).reason
    assert place.filter(pod("b", 2000), list(NODES), now=0.0).passed == list(NODES)


def test_each_card_of_a_multi_card_request_counts_against_the_quota() -> None:
    _, place = placement({"team": parse_quotas([gpumem(10_000)], DEFAULT_NAMES)})
    assert place.filter(pod("two", 5000, nums=2), list(NODES), now=0.0).passed == list(NODES)
    failed = place.filter(pod("two", 5001, nums=2), list(NODES), now=0.0).failed
    assert failed["n1"] == "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"


def test_a_pods_own_entry_does_not_count_against_it() -> None:
    ledger, place = placement({"team": parse_quotas([gpumem(10_000)], DEFAULT_NAMES)})
    ledger.apply(entry("same", 8000), 1)
    assert place.filter(pod("same", 8000), list(NODES), now=0.0).passed == list(NODES)


def test_memory_factor_scales_the_limit_and_an_explicit_zero_blocks() -> None:
    _, scaled = placement({"team": parse_quotas([gpumem(10)], DEFAULT_NAMES)}, factor=1000)
    assert scaled.filter(pod("p", 10_000), list(NODES), now=0.0).passed == list(NODES)
    assert scaled.filter(pod("p", 10_001), list(NODES), now=0.0).passed == []
    _, zero = placement({"team": parse_quotas([gpumem(0)], DEFAULT_NAMES)})
    assert zero.filter(pod("p", 1), list(NODES), now=0.0).failed["n1"] == "2/2 ResourceQuotaNotFit"


def test_a_cores_quota_is_enforced_on_its_own() -> None:
    limits = parse_quotas([{"spec": {"hard": {"limits.nvidia.com/gpucores": "50"}}}], DEFAULT_NAMES)
    ledger, place = placement({"team": limits})
    ledger.apply(entry("a", 1000), 1)  # 10 cores
    assert place.filter(pod("p", 1000, cores=40), list(NODES), now=0.0).passed == list(NODES)
    assert place.filter(pod("p", 1000, cores=41), list(NODES), now=0.0).passed == []


def test_other_namespaces_and_pods_without_a_quota_are_unaffected() -> None:
    _, place = placement({"team": parse_quotas([gpumem(1)], DEFAULT_NAMES)})
    assert place.filter(pod("p", 70_000, ns="free"), list(NODES), now=0.0).passed == list(NODES)
    assert place.quota_for(pod("p", 1, ns="free")) is None
