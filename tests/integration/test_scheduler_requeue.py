"""When what made gpubus refuse pods ends, kube-scheduler is made to retry them at once.

Case matrix: a pod refused because its node's inventory went stale (NATS lost quorum, say) gets
the ``gpubus.io/requeue-at`` annotation when the node's inventory comes back, counted; a pod that
fits nowhere with every node fresh gets none (nothing came back); a refused pod that fits at its
next filter is no longer nudged.
"""

from __future__ import annotations

import time
from typing import Any

from asyncwait import wait_until
from scheduler_harness import ExtenderClient, create_node, gpu_pod, register_node, slice_of

from services.scheduler.app import SchedulerApp
from services.scheduler.requeue import REQUEUE_ANNOTATION
from shared.bus import Bus
from shared.model import NodeName

pytest_plugins = ("scheduler_fixtures",)


async def _annotations(kube: Any, name: str) -> dict[str, str]:
    pod = await kube.get_pod("default", name)
    return dict(pod["metadata"].get("annotations") or {})


async def _patched(client: ExtenderClient) -> float:
    _, metrics = await client.get("/metrics")
    line = 'gpubus_scheduler_requeue_patches_total{outcome="patched"} '
    return next((float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line)), 0.0)


async def test_pods_refused_while_a_node_was_stale_are_retried_when_it_comes_back(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    await create_node(kube, "n1")
    await register_node(bus, "n1", 1, ts=time.time() - 1000, heartbeat_s=10.0)  # stale
    await wait_until(lambda: NodeName("n1") in scheduler.ledger, what="n1 (stale)")
    waiting = dict(await kube.create_pod("default", gpu_pod("waiting", slice_of(1000))))
    assert (await client.filter(waiting, ["n1"]))["NodeNames"] == []
    assert REQUEUE_ANNOTATION not in await _annotations(kube, "waiting")
    passes = scheduler.requeuer.passes
    await register_node(bus, "n1", 1)  # heartbeats again
    await wait_until(lambda: scheduler.requeuer.passes > passes, what="a requeue pass")
    assert REQUEUE_ANNOTATION in await _annotations(kube, "waiting")
    assert await _patched(client) == 1
    assert (await client.filter(waiting, ["n1"]))["NodeNames"] == ["n1"]  # what kube-scheduler now asks


async def test_a_pod_that_fits_nowhere_is_not_nudged_by_plain_heartbeats(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    await create_node(kube, "n1")
    await register_node(bus, "n1", 1)
    await wait_until(lambda: NodeName("n1") in scheduler.ledger, what="n1")
    huge = dict(await kube.create_pod("default", gpu_pod("huge", slice_of(10_000_000))))
    assert (await client.filter(huge, ["n1"]))["NodeNames"] == []
    passes = scheduler.requeuer.passes
    held = scheduler.ledger.inventory(NodeName("n1"))
    assert held is not None
    await register_node(bus, "n1", 1, ts=held.seen_at + 1)  # the node never went away
    await wait_until(lambda: (inv := scheduler.ledger.inventory(NodeName("n1"))) is not None
                     and inv.seen_at > held.seen_at, what="the heartbeat applied")
    assert not scheduler.requeuer.wanted and scheduler.requeuer.passes == passes
    assert REQUEUE_ANNOTATION not in await _annotations(kube, "huge")
