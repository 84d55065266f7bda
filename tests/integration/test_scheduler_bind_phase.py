"""The ``hami.io/bind-phase`` writer: off the event path, bounded, best effort.

Matrix: patches queued beyond the bound are dropped and counted (submit never waits); queued
patches are written by the worker in order; a patch for a pod that is gone is counted as failed
and the worker goes on; without a Kubernetes API nothing is queued; the ``hami.io/vgpu-node``
label rides on the same patch when labels are on and the node name is a valid label value.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from scheduler_harness import gpu_pod, slice_of

from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.bindphase import BindPhaseWriter
from shared import annotations as ann

pytest_plugins = ("scheduler_fixtures",)


async def test_a_full_queue_drops_instead_of_waiting_and_the_worker_writes_the_rest(
    kube: SimKubeClient,
) -> None:
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


@pytest.mark.parametrize(
    ("label_nodes", "node", "label"),
    [(True, "n1", "n1"), (True, "x" * 64, None), (False, "n1", None), (True, "", None)],
)
async def test_the_verdict_patch_also_sets_the_node_label(
    kube: SimKubeClient, label_nodes: bool, node: str, label: str | None
) -> None:
    name = f"l-{label_nodes}-{len(node)}".lower()
    await kube.create_pod("default", gpu_pod(name, slice_of(1000)))  # type: ignore[arg-type]
    writer = BindPhaseWriter(kube, label_nodes=label_nodes)
    assert writer.submit("default", name, ann.BindPhase.SUCCESS, node)
    worker = asyncio.create_task(writer.run(), name="bind-phase-label-test")
    try:
        await asyncio.wait_for(writer.drained(), timeout=10)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    pod = await kube.get_pod("default", name)
    assert pod is not None and pod["metadata"]["annotations"][ann.BIND_PHASE] == "success"
    assert (pod["metadata"].get("labels") or {}).get(ann.ASSIGNED_NODE) == label
    await kube.delete_pod("default", name)


def test_without_a_kubernetes_api_nothing_is_queued() -> None:
    assert not BindPhaseWriter(None).submit("default", "a", ann.BindPhase.SUCCESS)
