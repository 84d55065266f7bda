"""``gpubus explain --pending``'s core in DRA mode (services/scheduler/dra_explain.py).

Cases: free memory and cores per card are capacity minus what allocated claims consume there; a
request too big for every card says so per card and finds no node; one that fits lists the node;
several cards need that many fitting cards on one node; a tainted card never fits; the whole card
(no memory asked) needs an untouched card; kube-scheduler's latest FailedScheduling message leads;
selectors are shown, not evaluated; another class's requests are not ours.
"""

from __future__ import annotations

from typing import Any

from services.scheduler.dra_explain import explain_pending, render

POD = {"metadata": {"namespace": "default", "name": "p"}, "status": {"phase": "Pending"}}


def device(index: int, *, taint: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {"name": f"gpu-{index}", "attributes": {"productName": {"string": "NVIDIA-A100"}},
                         "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}}}
    if taint:
        d["taints"] = [{"key": "gpubus.io/unhealthy", "value": "true", "effect": "NoSchedule"}]
    return d


SLICE = {"spec": {"driver": "gpubus.io", "nodeName": "node-1", "pool": {"name": "node-1"},
                  "devices": [device(0), device(1, taint=True)]}}
HELD = {"metadata": {"name": "held"}, "status": {"allocation": {"devices": {"results": [
    {"driver": "gpubus.io", "pool": "node-1", "device": "gpu-0", "request": "gpu",
     "consumedCapacity": {"memory": "30Gi", "cores": "40"}}]}}}}


def claim(memory: str | None = None, cores: str = "0", count: int = 1, cls: str = "gpubus.io",
          selectors: tuple[str, ...] = ()) -> dict[str, Any]:
    asked: dict[str, str] = {"cores": cores}
    if memory is not None:
        asked["memory"] = memory
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count, "capacity": {"requests": asked}}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    requests = [{"name": "gpu", "exactly": exactly}]
    return {"metadata": {"name": "c"}, "spec": {"devices": {"requests": requests}}, "status": {}}


EVENTS = [{"reason": "FailedScheduling", "message": "old", "lastTimestamp": "2026-01-01T00:00:00Z"},
          {"reason": "FailedScheduling", "message": "0/1 nodes are available: 1 cannot allocate all claims.",
           "lastTimestamp": "2026-01-01T00:01:00Z"},
          {"reason": "Scheduled", "message": "x", "lastTimestamp": "2026-01-01T00:02:00Z"}]


def test_too_big_for_every_card_says_why_per_card() -> None:
    report = explain_pending(POD, [claim("60Gi")], [SLICE], [HELD], EVENTS)
    assert report["scheduler"] == "0/1 nodes are available: 1 cannot allocate all claims."
    [r] = report["requests"]
    assert (r["memory_mib"], r["fitting_nodes"], r["allocated"]) == (61440, [], False)
    gpu0, gpu1 = r["cards"]
    assert (gpu0["free_memory_mib"], gpu0["free_cores"]) == (51200, 60)
    assert gpu0["why"] == "memory: asks 61440 MiB, 51200 MiB free"
    assert gpu1["why"] == "tainted gpubus.io/unhealthy"
    text = render(report)
    assert "cannot allocate all claims" in text and "nodes with 1 fitting card(s): none" in text


def test_what_fits_names_its_node_and_counts_cards() -> None:
    [r] = explain_pending(POD, [claim("10Gi", "60")], [SLICE], [HELD], [])["requests"]
    assert r["fitting_nodes"] == ["node-1"]
    [r] = explain_pending(POD, [claim("10Gi", "61")], [SLICE], [HELD], [])["requests"]
    assert r["cards"][0]["why"] == "cores: asks 61 %, 60 % free" and r["fitting_nodes"] == []
    [r] = explain_pending(POD, [claim("1Gi", count=2)], [SLICE], [], [])["requests"]
    assert r["fitting_nodes"] == []  # gpu-1 is tainted: one card fits, two are asked


def test_the_whole_card_needs_an_untouched_one() -> None:
    [r] = explain_pending(POD, [claim(None)], [SLICE], [HELD], [])["requests"]
    assert r["memory_mib"] is None and r["fitting_nodes"] == []
    [r] = explain_pending(POD, [claim(None)], [SLICE], [], [])["requests"]
    assert r["fitting_nodes"] == ["node-1"]


def test_selectors_shown_and_other_classes_ignored() -> None:
    report = explain_pending(POD, [claim("1Gi", selectors=("device.attributes[\"gpubus.io\"].index == 0",)),
                                   claim("1Gi", cls="gpu.nvidia.com")], [SLICE], [], [])
    [r] = report["requests"]
    assert r["selectors"] == ['device.attributes["gpubus.io"].index == 0']
    assert "kube-scheduler evaluates them" in render(report)
    assert "(no FailedScheduling event)" in render(report)
