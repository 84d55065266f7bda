"""core/v1 Events on the SimApiServer, through the real SimKubeClient, the stand-ins' recorder and kubectl.

Case matrix: create/get/list in one namespace and in all; the field selectors ``kubectl describe``
sends (involvedObject name, namespace, uid; also kind, type, reason, source); watch with a selector
(ADDED, MODIFIED on a patch, nothing for other objects); delete; a namespace's deletion takes its
events; refused writes (event in another namespace than its object 422, wrong JSON type 400); the
recorder's repeats are one event with a count; the real kubectl: ``get events`` (also ``ev -A -o
wide`` and ``--sort-by=.lastTimestamp``) and ``describe pod`` list them as on a real cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sim_fixtures
from asyncwait import wait_until
from kubectl import kubectl, needs_kubectl

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.events import EventRecorder, build_event, pod_reference
from gpubus_local.sim.kube import SimKubeClient
from shared.kube import KubeRejected, NotFound
from shared.kube_types import Event, EventSource, Pod, WatchEvent

# this module's SimApiServer and SimKubeClient fixtures (bound by name: see sim_fixtures)
server = sim_fixtures.server
kube = sim_fixtures.kube

SCHEDULER: EventSource = {"component": "gpubus-scheduler"}
KUBELET: EventSource = {"component": "kubelet", "host": "node-1"}


async def make_pod(kube: SimKubeClient, name: str, namespace: str = "default") -> Pod:
    return await kube.create_pod(namespace, {"metadata": {"name": name}, "spec": {
        "containers": [{"name": "main", "image": "cuda"}]}})


_clock = iter(range(1_780_000_000_000_000_000, 1_790_000_000_000_000_000, 1_000_000_000))


def about(pod: Pod, reason: str = "FailedScheduling", message: str = "0/4 nodes are available",
          source: EventSource = SCHEDULER, field_path: str = "") -> Event:
    type_ = "Warning" if reason.startswith(("Failed", "Unexpected")) else "Normal"
    return build_event(source, pod_reference(pod, field_path), type_, reason, message, now_ns=next(_clock))


@asynccontextmanager
async def recording(kube: SimKubeClient) -> AsyncIterator[EventRecorder]:
    """A scheduler's recorder, running; on leaving, every event it was given is written."""
    recorder = EventRecorder(kube, SCHEDULER)
    task = asyncio.create_task(recorder.run(), name="test-event-recorder")
    try:
        yield recorder
        await asyncio.wait_for(recorder.drained(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def delete(server: SimApiServer, path: str) -> None:
    async with aiohttp.ClientSession() as session, session.delete(server.url + path) as response:
        assert response.status == 200, await response.text()


async def names(kube: SimKubeClient, namespace: str | None = "default",
                fields: str | None = None) -> list[str]:
    events, _ = await kube.list_events(namespace, field_selector=fields)
    return sorted(e["metadata"]["name"] for e in events)


async def test_events_are_created_read_listed_and_deleted(server: SimApiServer, kube: SimKubeClient) -> None:
    await kube.create_namespace("team")
    p, q = await make_pod(kube, "p"), await make_pod(kube, "q", "team")
    first = await kube.create_event("default", about(p))
    second = await kube.create_event("team", about(q, "Scheduled", "Successfully assigned team/q to node-1"))
    assert first["metadata"]["uid"] and first["metadata"]["resourceVersion"]
    assert first["involvedObject"] == pod_reference(p)
    assert await names(kube) == [first["metadata"]["name"]]
    assert await names(kube, None) == sorted([first["metadata"]["name"], second["metadata"]["name"]])
    patched = await kube.patch_event("default", first["metadata"]["name"], {"count": 2, "message": "again"})
    assert (patched["count"], patched["message"], patched["reason"]) == (2, "again", "FailedScheduling")
    await delete(server, f"/api/v1/namespaces/default/events/{first['metadata']['name']}")
    assert await names(kube) == []
    with pytest.raises(NotFound):
        await kube.patch_event("default", first["metadata"]["name"], {"count": 3})


async def test_the_selectors_kubectl_describe_sends_find_one_objects_events(kube: SimKubeClient) -> None:
    p, q = await make_pod(kube, "p"), await make_pod(kube, "q")
    mine = [await kube.create_event("default", about(p)),
            await kube.create_event("default", about(p, "Started", "Started container main", KUBELET,
                                                     "spec.containers{main}"))]
    await kube.create_event("default", about(q))
    meta = p["metadata"]
    describe = f"involvedObject.name=p,involvedObject.namespace=default,involvedObject.uid={meta['uid']}"
    assert await names(kube, "default", describe) == sorted(e["metadata"]["name"] for e in mine)
    assert await names(kube, None, "involvedObject.kind=Pod,involvedObject.name=p,type=Warning") == [
        mine[0]["metadata"]["name"]]
    assert await names(kube, None, "source=kubelet,reason=Started") == [mine[1]["metadata"]["name"]]
    assert await names(kube, "default", "involvedObject.uid=someone-else") == []


async def test_a_watch_with_a_selector_sees_its_objects_events_and_their_repeats(kube: SimKubeClient) -> None:
    p, q = await make_pod(kube, "p"), await make_pod(kube, "q")
    _, rv = await kube.list_events("default")
    stream = kube.watch_events(rv, namespace="default", field_selector="involvedObject.name=p")
    seen: list[WatchEvent] = []

    async def follow() -> None:
        async for change in stream:
            if change["type"] != "BOOKMARK":
                seen.append(change)

    task = asyncio.create_task(follow(), name="test-event-watch")
    try:
        await kube.create_event("default", about(q))
        created = await kube.create_event("default", about(p))
        await kube.patch_event("default", created["metadata"]["name"], {"count": 2})
        await wait_until(lambda: len(seen) == 2, what="ADDED and MODIFIED")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [(c["type"], c["object"]["involvedObject"]["name"], c["object"]["count"]) for c in seen] == [
        ("ADDED", "p", 1), ("MODIFIED", "p", 2)]


async def test_deleting_a_namespace_deletes_its_events(server: SimApiServer, kube: SimKubeClient) -> None:
    await kube.create_namespace("team")
    await kube.create_event("team", about(await make_pod(kube, "q", "team")))
    await delete(server, "/api/v1/namespaces/team")
    assert await names(kube, None) == []


@pytest.mark.parametrize(("change", "status"), [
    ({"involvedObject": {"kind": "Pod", "name": "p", "namespace": "elsewhere"}}, 422),
    ({"count": "3"}, 400),
    ({"involvedObject": "pod/p"}, 400),
    ({"source": {"component": 7}}, 400),
])
async def test_an_event_the_server_could_not_read_back_is_refused(kube: SimKubeClient, change: dict[str, Any],
                                                                   status: int) -> None:
    event = {**about(await make_pod(kube, "p")), **change}
    with pytest.raises(KubeRejected) as info:
        await kube.create_event("default", event)  # type: ignore[arg-type]
    assert info.value.code == status
    assert await names(kube, None) == []


async def test_the_recorder_writes_repeats_as_one_event_with_a_count(kube: SimKubeClient) -> None:
    pod = await make_pod(kube, "p")
    async with recording(kube) as recorder:
        for _ in range(3):
            recorder.record(pod_reference(pod), "Warning", "FailedScheduling", "0/4 nodes are available")
    [event], _ = await kube.list_events("default")
    assert (event["count"], event["reason"], event["source"]) == (3, "FailedScheduling", SCHEDULER)
    assert (recorder.stats.created, recorder.stats.patched) == (1, 2)


# --------------------------------------------------------------------------- kubectl


@needs_kubectl
async def test_kubectl_get_events_prints_the_real_columns(server: SimApiServer, kube: SimKubeClient,
                                                          tmp_path: Path) -> None:
    pod = await make_pod(kube, "p")
    assigned = "Successfully assigned default/p to n1"
    scheduled = await kube.create_event("default", about(pod, "Scheduled", assigned))
    await kube.create_event("default", about(pod, "Started", "Started container main", KUBELET,
                                             "spec.containers{main}"))
    config = server.write_kubeconfig(tmp_path / "kubectl-config")
    code, out, err = await kubectl(config, "get", "events")
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [row.split()[1:4] for row in rows] == [["Normal", "Scheduled", "pod/p"],
                                                  ["Normal", "Started", "pod/p"]]
    assert rows[0].endswith(assigned)
    code, out, err = await kubectl(config, "get", "ev", "-A", "-o", "wide")
    assert code == 0, err
    assert "spec.containers{main}" in out and "kubelet, node-1" in out
    assert scheduled["metadata"]["name"] in out
    code, out, err = await kubectl(config, "get", "events", "--sort-by=.lastTimestamp")
    assert code == 0 and "Scheduled" in out and "Started" in out, out + err


@needs_kubectl
async def test_kubectl_describe_pod_lists_its_events(server: SimApiServer, kube: SimKubeClient,
                                                     tmp_path: Path) -> None:
    pod, other = await make_pod(kube, "p"), await make_pod(kube, "other")
    why = "0/4 nodes are available: 4 4/4 CardInsufficientMemory."
    async with recording(kube) as recorder:
        for _ in range(2):
            recorder.record(pod_reference(pod), "Warning", "FailedScheduling", why)
        recorder.record(pod_reference(other), "Normal", "Scheduled", "not about p")
    config = server.write_kubeconfig(tmp_path / "kubectl-config")
    code, out, err = await kubectl(config, "describe", "pod", "p")
    assert code == 0, err
    events = out.split("Events:", 1)[1].splitlines()
    assert events[1].split() == ["Type", "Reason", "Age", "From", "Message"]
    [row] = events[3:]
    assert row.split()[:2] == ["Warning", "FailedScheduling"] and "(x2 over" in row
    assert row.split("gpubus-scheduler", 1)[1].strip() == why
