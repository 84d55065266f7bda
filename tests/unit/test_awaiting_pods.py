"""Which pods the leader's pod watch keeps whole for /bind, and that it lets them go.

Case matrix: ``awaits_bind`` holds for our unbound pending pods (any pod when the scheduler name is
""), not for a bound one, a finished one, or another scheduler's; ``AwaitingPods`` holds the last
version put, drops one pod, and forgets all on ``clear`` (the watch that kept them stopped).
"""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.watched import AwaitingPods, awaits_bind


def pod(*, scheduler: str = "gpubus", node: str = "", phase: str = "Pending") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"uid": "u1", "resourceVersion": "1"}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(("the_pod", "ours", "expected"), [
    (pod(), "gpubus", True),
    (pod(scheduler="default-scheduler"), "", True),
    (pod(scheduler="default-scheduler"), "gpubus", False),
    (pod(node="n1"), "gpubus", False),
    (pod(phase="Succeeded"), "gpubus", False),
    (pod(phase="Failed"), "gpubus", False),
    ({"metadata": {"uid": "u1"}}, "", True),
])
def test_awaits_bind(the_pod: dict[str, Any], ours: str, expected: bool) -> None:
    assert awaits_bind(the_pod, ours) is expected


def test_the_last_version_is_held_until_dropped_or_cleared() -> None:
    held = AwaitingPods()
    first, second = pod(), {**pod(), "metadata": {"uid": "u1", "resourceVersion": "2"}}
    held.put("u1", first)
    held.put("u1", second)
    held.put("u2", pod())
    assert held.get("u1") is second and len(held) == 2
    held.drop("u1")
    held.drop("u1")  # already gone: nothing to do
    assert held.get("u1") is None and len(held) == 1
    held.clear()
    assert held.get("u2") is None and len(held) == 0
