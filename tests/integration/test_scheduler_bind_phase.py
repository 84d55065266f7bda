"""The ``hami.io/bind-phase`` writer: off the event path, bounded, best effort.

Matrix: patches queued beyond the bound are dropped and counted (submit never waits); queued
patches are written by the worker in order; a patch for a pod that is gone is counted as failed
and the worker goes on; without a Kubernetes API nothing is queued.
"""

from __future__ import annotations

import asyncio
import contextlib

from scheduler_harness import gpu_pod, slice_of

from services.scheduler.bindphase import BindPhaseWriter
from shared import annotations as ann
from shared.kube import KubeClient

pytest_plugins = ("scheduler_fixtures",)


async def test_a_full_queue_drops_instead_of_waiting_and_the_worker_writes_the_rest(kube: KubeClient) -> None:
    for name in ("a", "b"):
        await kube.create_pod("default", gpu_pod(name, slice_of(1000)))  # type: ignore[arg-type]
    outcomes: list[str] = []
    writer = BindPhaseWriter(kube, size=2, on_outcome=outcomes.append)
    assert writer.submit("default", "a", ann.BindPhase.SUCCESS)
    assert writer.submit("default", "gone", ann.BindPhase.FAILED)
    assert not writer.submit("default", "b", ann.BindPhase.SUCCESS)  # full: dropped at once
    worker = asyncio.create_task(writer.run(), name="bind-phase-test")
    try:
        await asyncio.wait_for(writer.drained(), timeout=10)
        assert writer.submit("default", "b", ann.BindPhase.FAILED)
        await asyncio.wait_for(writer.drained(), timeout=10)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    assert outcomes == ["dropped", "written", "failed", "written"]
    for name, phase in (("a", "success"), ("b", "failed")):
        pod = await kube.get_pod("default", name)
        assert pod is not None and pod["metadata"]["annotations"][ann.BIND_PHASE] == phase


def test_without_a_kubernetes_api_nothing_is_queued() -> None:
    assert not BindPhaseWriter(None).submit("default", "a", ann.BindPhase.SUCCESS)
