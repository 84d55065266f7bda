"""The e2e invariant checker must catch what it claims to (so a green e2e run means something)."""

from __future__ import annotations

from typing import Any

from e2e_invariants import Facts, check, replay_overcommit


def inventory(*ids: str, mem: int = 1000) -> dict[str, Any]:
    return {"kind": "inventory.snapshot", "devices": [{"id": i, "count": 2, "devmem": mem, "devcore": 100}
                                                      for i in ids]}


def decided(uid: str, dev: str, mem: int, cores: int = 10) -> dict[str, Any]:
    return {"kind": "allocation.decided", "allocation": {
        "pod_uid": uid, "namespace": "ns", "name": uid,
        "devices": [[{"uuid": dev, "usedmem": mem, "usedcores": cores}]]}}


def released(uid: str) -> dict[str, Any]:
    return {"kind": "allocation.released", "pod_uid": uid}


def test_memory_over_commit_is_reported() -> None:
    assert replay_overcommit([inventory("g"), decided("a", "g", 600), decided("b", "g", 600)])


def test_slot_and_core_over_commit_are_reported() -> None:
    assert replay_overcommit([inventory("g"), decided("a", "g", 1, 60), decided("b", "g", 1, 60)])
    assert replay_overcommit([inventory("g"), *(decided(u, "g", 1, 1) for u in "abc")])


def test_release_and_redecision_free_the_device() -> None:
    events = [inventory("g"), decided("a", "g", 600), released("a"), decided("b", "g", 600),
              decided("b", "g", 600)]
    assert replay_overcommit(events) == []


def test_a_running_pod_with_other_limits_than_asked_is_reported() -> None:
    pod = {"metadata": {"namespace": "ns", "name": "p", "uid": "u"}, "spec": {"nodeName": "n", "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 500,
                                               "nvidia.com/gpucores": 10}}}]},
           "status": {"phase": "Running"}}
    admitted = {"u": {"containers": {"c": {"device_ids": ["g-0"], "envs": {
        "NVIDIA_VISIBLE_DEVICES": "g", "CUDA_DEVICE_MEMORY_LIMIT_0": "600m", "CUDA_DEVICE_SM_LIMIT": "10"}}}}}
    facts = Facts(events=[inventory("g")], pods=[pod], admissions=admitted, ledger={"u"}, locks=set())
    assert check(facts) == ["ns/p/c: CUDA_DEVICE_MEMORY_LIMIT_0=600m, asked 500m"]


def test_ledger_drift_stuck_leases_and_silent_pending_are_reported() -> None:
    pending = {"metadata": {"namespace": "ns", "name": "q", "uid": "v"}, "spec": {}, "status": {}}
    facts = Facts(events=[], pods=[pending], admissions={}, ledger={"ghost"}, locks={"alloc.n.1", "leader"})
    problems = check(facts)
    assert len(problems) == 3
