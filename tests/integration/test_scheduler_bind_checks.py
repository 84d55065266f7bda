"""/bind verifies what it is asked: the pod is ours, exists with the UID given, and still fits the
node by the checks filter relies on, whatever /filter was told before (or if it was never asked).

Case matrix (each asked directly at /bind, each refused with a clear Error, counted by outcome,
the pod left unbound): another schedulerName; a UID that is not the pod's; a nodeSelector the node
does not match (after a forged /filter body without it); required node affinity the node does not
match; a NoSchedule taint not tolerated; an unschedulable node; more memory than the card has.
And the same checks let a matching pod (selector, affinity, toleration) through.
"""

from __future__ import annotations

from typing import Any

import pytest
from asyncwait import wait_until
from scheduler_harness import ExtenderClient, gpu_pod, register_node, slice_of

from services.scheduler.app import SchedulerApp
from shared.bus import Bus
from shared.model import NodeName, PodUID

pytest_plugins = ("scheduler_fixtures",)

AFFINITY_B = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
TAINT = {"key": "gpu", "value": "reserved", "effect": "NoSchedule"}


async def _node(bus: Bus, kube: Any, app: SchedulerApp, name: str, *, labels: dict[str, str] | None = None,
                taints: list[dict[str, str]] | None = None, unschedulable: bool = False) -> None:
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    await kube.create_node({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": labels or {}}, "spec": spec})
    await register_node(bus, name, 1)
    await wait_until(lambda: NodeName(name) in app.ledger and NodeName(name) in app.nodes, what="node seen")


async def _pod(kube: Any, name: str, *, mem: int = 1000, scheduler: str = "gpubus-scheduler",
               **spec: Any) -> dict[str, Any]:
    pod = gpu_pod(name, slice_of(mem, 10), scheduler=scheduler)
    pod["spec"].update(spec)
    return dict(await kube.create_pod("default", pod))


async def _counted(client: ExtenderClient, outcome: str) -> float:
    _, metrics = await client.get("/metrics")
    line = f'gpubus_scheduler_decisions_total{{outcome="{outcome}",verb="bind"}} '
    return next((float(x.split()[-1]) for x in metrics.splitlines() if x.startswith(line)), 0.0)


async def _refused(client: ExtenderClient, kube: Any, app: SchedulerApp, pod: dict[str, Any], node: str,
                   *, outcome: str, message: str) -> None:
    before = await _counted(client, outcome)
    error = await client.bind(pod, node)
    assert message in error, error
    assert await _counted(client, outcome) == before + 1
    fresh = await kube.get_pod("default", pod["metadata"]["name"])
    assert fresh is not None and not fresh["spec"].get("nodeName")
    assert app.ledger.entry(PodUID(fresh["metadata"]["uid"])) is None


async def test_a_pod_of_another_scheduler_is_not_bound(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    await _node(bus, kube, scheduler, "n1")
    pod = await _pod(kube, "theirs", scheduler="default-scheduler")
    await _refused(client, kube, scheduler, pod, "n1", outcome="not_ours",
                   message="schedulerName 'default-scheduler'")


async def test_a_uid_that_is_not_the_pods_is_refused(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    await _node(bus, kube, scheduler, "n1")
    pod = await _pod(kube, "p")
    forged = {**pod, "metadata": {**pod["metadata"], "uid": "not-the-uid"}}
    await _refused(client, kube, scheduler, forged, "n1", outcome="pod_not_found",
                   message="it was re-created")


async def test_a_node_selector_is_checked_even_after_a_forged_filter(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    await _node(bus, kube, scheduler, "n1", labels={"zone": "a"})
    pod = await _pod(kube, "p", nodeSelector={"zone": "b"})
    forged = {**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeSelector"}}
    assert (await client.filter(forged, ["n1"]))["NodeNames"] == ["n1"]  # what the request claims
    await _refused(client, kube, scheduler, pod, "n1", outcome="node_mismatch", message="nodeSelector")


@pytest.mark.parametrize(("node", "spec", "message"), [
    ({"labels": {"zone": "a"}}, {"affinity": AFFINITY_B}, "required node affinity"),
    ({"taints": [TAINT]}, {}, "taint the pod does not tolerate"),
    ({"unschedulable": True}, {}, "unschedulable"),
])
async def test_a_node_the_pod_may_not_go_to_is_refused(  # noqa: PLR0917 (fixtures)
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient,
        node: dict[str, Any], spec: dict[str, Any], message: str) -> None:
    await _node(bus, kube, scheduler, "n1", **node)
    pod = await _pod(kube, "p", **spec)
    await _refused(client, kube, scheduler, pod, "n1", outcome="node_mismatch", message=message)


async def test_a_pod_that_does_not_fit_the_card_is_refused(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    await _node(bus, kube, scheduler, "n1")
    pod = await _pod(kube, "big", mem=10_000_000)
    await _refused(client, kube, scheduler, pod, "n1", outcome="no_fit", message="does not fit node n1")


async def test_a_pod_that_matches_the_node_is_bound(
        bus: Bus, kube: Any, scheduler: SchedulerApp, client: ExtenderClient) -> None:
    await _node(bus, kube, scheduler, "n1", labels={"zone": "b"}, taints=[TAINT])
    pod = await _pod(kube, "p", nodeSelector={"zone": "b"}, affinity=AFFINITY_B,
                     tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert await client.bind(pod, "n1") == ""
    bound = await kube.get_pod("default", "p")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
