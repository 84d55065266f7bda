"""The e2e invariant checker must catch what it claims to (so a green e2e run means something)."""

from __future__ import annotations

from typing import Any

from e2e_invariants import Facts, changes_unseen, check, replay_overcommit


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


def _gpu_pod(uid: str, phase: str, node: str | None = "n") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"namespace": "ns", "name": uid, "uid": uid}, "spec": spec,
            "status": {"phase": phase}}


# no memory asked: the whole card
_ADMITTED = {"u": {"containers": {"c": {"device_ids": ["g-0"], "envs": {
    "NVIDIA_VISIBLE_DEVICES": "g", "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m"}}}}}


def test_a_pod_released_between_the_pod_and_ledger_reads_is_recognised_by_its_release() -> None:
    # pods read (u Running), u finishes and is released, ledger read (no u), pods read again (Succeeded)
    events = [inventory("g"), decided("u", "g", 500), released("u")]
    facts = Facts(events=events, pods=[_gpu_pod("u", "Running")], admissions=_ADMITTED, ledger=set(),
                  locks=set(), pods_after=[_gpu_pod("u", "Succeeded")])
    assert check(facts) == []
    # deleted by the second read: the same
    facts.pods_after = []
    assert check(facts) == []


def test_a_missing_ledger_entry_is_still_reported_when_the_pods_are_read_twice() -> None:
    running = [_gpu_pod("u", "Running")]
    released_events = [inventory("g"), decided("u", "g", 500), released("u")]
    # still Running in the second read: its entry is missing, whatever the stream says
    facts = Facts(events=released_events, pods=running, admissions=_ADMITTED, ledger=set(), locks=set(),
                  pods_after=running)
    assert check(facts) == ["ledger != live pods: extra [], missing ['ns/u']"]
    # finished by the second read, but the stream never released it (or decided it again after)
    for events in ([inventory("g"), decided("u", "g", 500)],
                   [*released_events, decided("u", "g", 500)]):
        facts = Facts(events=events, pods=running, admissions=_ADMITTED, ledger=set(), locks=set(),
                      pods_after=[_gpu_pod("u", "Succeeded")])
        assert check(facts) == ["ledger != live pods: extra [], missing ['ns/u']"]
    # read once: no second read excuses anything
    facts = Facts(events=released_events, pods=running, admissions=_ADMITTED, ledger=set(), locks=set())
    assert check(facts) == ["ledger != live pods: extra [], missing ['ns/u']"]


def test_a_pod_bound_between_the_reads_may_be_in_the_ledger_only_once_decided() -> None:
    pending = [_gpu_pod("u", "Pending", node=None)]
    bound = [_gpu_pod("u", "Pending")]
    unschedulable = {"kind": "pod.unschedulable", "uid": "u", "namespace": "ns", "name": "u"}
    events = [inventory("g"), unschedulable, decided("u", "g", 500)]
    facts = Facts(events=events, pods=pending, admissions={}, ledger={"u"}, locks=set(), pods_after=bound)
    assert check(facts) == []
    facts = Facts(events=events[:2], pods=pending, admissions={}, ledger={"u"}, locks=set(), pods_after=bound)
    assert check(facts) == ["ledger != live pods: extra ['u'], missing []"]
    facts = Facts(events=events, pods=pending, admissions={}, ledger={"u"}, locks=set(), pods_after=pending)
    assert check(facts) == ["ledger != live pods: extra ['u'], missing []"]


def test_changes_unseen_names_the_pods_whose_event_the_stream_does_not_hold_yet() -> None:
    facts = Facts(events=[inventory("g"), decided("u", "g", 500)], pods=[_gpu_pod("u", "Running")],
                  admissions=_ADMITTED, ledger=set(), locks=set(), pods_after=[_gpu_pod("u", "Succeeded")])
    assert changes_unseen(facts) == {"u"}
    facts.events.append(released("u"))
    assert changes_unseen(facts) == set()
