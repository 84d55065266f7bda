"""The stand-in requeues an unschedulable pod when the pod itself changes, as kube-scheduler does
(UnscheduledPodUpdate): an annotation or label counts, its status, resourceVersion or
managedFields do not (kube-scheduler's isPodUpdated)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from manual_clock import ManualClock

from gpubus_local.sim.scheduler import _pod_itself_changed
from gpubus_local.sim.scheduling_queue import SchedulingQueue

POD: dict[str, Any] = {"metadata": {"name": "p", "uid": "u", "resourceVersion": "1", "annotations": {}},
                       "spec": {"schedulerName": "gpubus-scheduler"}, "status": {"phase": "Pending"}}


@pytest.mark.parametrize(("path", "value", "changed"), [
    (("metadata", "annotations"), {"gpubus.io/requeue-at": "1"}, True),
    (("metadata", "labels"), {"a": "b"}, True),
    (("metadata", "resourceVersion"), "2", False),
    (("metadata", "managedFields"), [{"manager": "x"}], False),
    (("status", "conditions"), [{"type": "PodScheduled", "status": "False"}], False),
])
def test_what_counts_as_an_update_of_the_pod(path: tuple[str, str], value: Any, changed: bool) -> None:
    new = copy.deepcopy(POD)
    new[path[0]][path[1]] = value
    assert _pod_itself_changed(POD, new) is changed


async def test_an_updated_unschedulable_pod_is_retried_without_a_cluster_event() -> None:
    clock = ManualClock()
    queue = SchedulingQueue(clock=clock)
    queue.add("a")
    assert await queue.pop() == "a"
    queue.failed("a", unschedulable=True)
    clock.advance(5.0)  # past its one-second backoff
    assert queue.updated("a") is True
    assert await asyncio.wait_for(queue.pop(), 5) == "a"
    assert queue.updated("a") is False  # in flight: nothing to move
