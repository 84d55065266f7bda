"""The real kube-scheduler retries a pod gpubus refused as soon as gpubus nudges it, on v1.37.

kube-scheduler parks a pod its extender refused until the next cluster event of any kind (the
extender counts as a rejecting plugin with no queueing hints, schedule_one.go) or, at most,
``podMaxInUnschedulablePodsDuration``: 5 minutes. What made gpubus refuse it here is invisible to
kube-scheduler: the node's inventory went stale (its node-agent stopped, SIGSTOP, with a 1 s
heartbeat), and nothing about the Node object changes when it comes back. gpubus then patches the
annotation ``gpubus.io/requeue-at`` on every pod it still holds refused, and an update of an
unschedulable pod is an event kube-scheduler requeues it on. The pod must start well inside the
5 minutes.

In a quiet cluster only the nudge brings the pod back. This stack is not quiet (the chart's pods
change status), so kube-scheduler may retry the pod on its own the moment the node is back,
before the nudge's pass: then the pod is placed, the requeuer drops it, and nothing is patched.
Either way no patch may fail, and a patch the requeuer counts must be on the pod.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import gpu_pod
from kube_harness import KubeE2E, running_kube_stack
from prometheus_client.parser import text_string_to_metric_families

from services.scheduler.requeue import REQUEUE_ANNOTATION

pytestmark = pytest.mark.timeout(600)

#: Seconds between the node-agent's inventory heartbeats (stale after three missed).
HEARTBEAT_S = 1
#: How long the pod may take to start once its node is back: well under kube-scheduler's 5-minute
#: flush of parked pods, so only the nudge (or an event it watches) can have started it.
BACK_WITHIN_S = 150
PATCHES = "gpubus_scheduler_requeue_patches_total"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def kube(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KubeE2E]:
    async with running_kube_stack(tmp_path_factory.mktemp("kube"), nodes=1, devices="2xA100-80GB",
                                  agent_args=("--heartbeat-s", str(HEARTBEAT_S))) as handle:
        yield handle


async def _metric(kube: KubeE2E, name: str, **labels: str) -> float:
    """The samples named ``name`` with ``labels`` on the gpubus scheduler's /metrics, summed."""
    port = kube.stack.ports.schedulers[0]
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


async def test_a_pod_refused_while_its_node_was_stale_starts_once_the_node_is_back(kube: KubeE2E) -> None:
    agent = kube.stack.children["node-agent-node-1"]
    assert agent.pid is not None
    tried_before = await _metric(kube, PATCHES)
    patched_before = await _metric(kube, PATCHES, outcome="patched")
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        async def stale() -> bool:
            return await _metric(kube, "gpubus_scheduler_stale_nodes") == 1
        await wait_until(stale, 60, what="node-1's inventory stale in the scheduler")
        await kube.create(gpu_pod("parked", mem=8000, cores=10))
        await kube.wait_unschedulable("parked", timeout=120)
        refused = await kube.wait_event("parked", "FailedScheduling", timeout=60)
        assert "node-1" in refused.get("message", "") or "0/1 nodes" in refused.get("message", ""), refused
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    await kube.wait_phase(["parked"], {"Running"}, timeout=BACK_WITHIN_S)
    tried = await _metric(kube, PATCHES) - tried_before
    patched = await _metric(kube, PATCHES, outcome="patched") - patched_before
    assert tried == patched, f"{tried - patched} requeue patch(es) of the parked pod failed"
    if patched:  # the nudge's pass took the pod: its patch is on the pod (the watch may lag it)
        await wait_until(lambda: REQUEUE_ANNOTATION in kube.pods["parked"]["metadata"].get("annotations", {}),
                         30, what=f"{REQUEUE_ANNOTATION} on the parked pod")
    await kube.check_invariants()
    await kube.kube.delete_pod("default", "parked")
