"""The real SimKubeClient (kubernetes_asyncio) against the SimApiServer over loopback.

Case matrix: pods (create/generateName, get, list with field and label selectors, merge patch,
optimistic concurrency, status subresource, delete), binding (201 Status, annotations merged in the
same write, second bind 409, UID precondition), watch (from rv, bookmarks, selector transitions,
410 as ERROR event and as HTTP status -> Gone), list_and_watch re-list after 410, nodes, resource
quotas, errors at the boundary (404/400/422/415, server down), and kubectl against the kubeconfig.
Webhook cases live in test_kube_webhook.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sim_fixtures
from aiohttp import web
from asyncwait import wait_until
from kubectl import kubectl, needs_kubectl

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.handlers import WatchSettings
from gpubus_local.sim.kube import SimKubeClient
from shared.kube import (
    Conflict,
    Gone,
    KubeClient,
    KubeRejected,
    KubeUnavailable,
    NotFound,
    list_and_watch_pods,
)
from shared.kube_types import Pod, WatchEvent

# this module's SimApiServer and SimKubeClient fixtures (bound by name: see sim_fixtures)
server = sim_fixtures.server
kube = sim_fixtures.kube


def pod(name: str = "", *, labels: dict[str, str] | None = None, node: str | None = None) -> Pod:
    meta: dict[str, Any] = {"name": name} if name else {"generateName": "p-"}
    meta["labels"] = labels or {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox",
                                             "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec}  # type: ignore[typeddict-item]


async def collect(
    events: AsyncIterator[WatchEvent], count: int, *, skip_bookmarks: bool = True
) -> list[WatchEvent]:
    seen: list[WatchEvent] = []
    async with asyncio.timeout(10):
        async for event in events:
            if skip_bookmarks and event["type"] == "BOOKMARK":
                continue
            seen.append(event)
            if len(seen) == count:
                break
    return seen


# pods -----------------------------------------------------------------------------------


async def test_create_with_generate_name_assigns_name_uid_and_pending_phase(kube: SimKubeClient) -> None:
    created = await kube.create_pod("default", pod())
    meta = created["metadata"]
    assert meta["name"].startswith("p-") and len(meta["name"]) == 7
    assert meta["uid"] and meta["resourceVersion"] and meta["namespace"] == "default"
    assert created["status"]["phase"] == "Pending"
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert await kube.get_pod("default", meta["name"]) == created


async def test_get_missing_pod_is_none(kube: SimKubeClient) -> None:
    assert await kube.get_pod("default", "nope") is None


async def test_create_existing_name_conflicts(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("same"))
    with pytest.raises(Conflict) as info:
        await kube.create_pod("default", pod("same"))
    assert info.value.reason == "AlreadyExists"


async def test_create_in_missing_namespace_is_not_found(kube: SimKubeClient) -> None:
    with pytest.raises(NotFound, match="namespaces"):
        await kube.create_pod("nowhere", pod())


async def test_pod_without_containers_is_invalid(kube: SimKubeClient) -> None:
    with pytest.raises(KubeRejected) as info:
        await kube.create_pod("default", {"metadata": {"name": "bad"}, "spec": {"containers": []}})
    assert info.value.code == 422 and "spec.containers" in str(info.value)


async def test_list_filters_by_field_selector(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("a", node="n1"))
    await kube.create_pod("default", pod("b", node="n2"))
    await kube.create_pod("default", pod("c"))

    async def names(selector: str) -> set[str]:
        return {p["metadata"]["name"] for p in (await kube.list_pods(field_selector=selector))[0]}

    assert await names("spec.nodeName=n1") == {"a"}
    assert await names("spec.nodeName==n2") == {"b"}
    assert await names("spec.nodeName=") == {"c"}
    assert await names("spec.nodeName!=n1,status.phase=Pending") == {"b", "c"}
    assert await names("metadata.name=c,metadata.namespace=default") == {"c"}


async def test_list_filters_by_label_selector(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("a", labels={"app": "x", "tier": "gpu"}))
    await kube.create_pod("default", pod("b", labels={"app": "y"}))
    await kube.create_pod("default", pod("c"))

    async def names(selector: str) -> set[str]:
        return {p["metadata"]["name"] for p in (await kube.list_pods(label_selector=selector))[0]}

    assert await names("app=x") == {"a"}
    assert await names("app!=x") == {"b", "c"}
    assert await names("app in (x,y)") == {"a", "b"}
    assert await names("app notin (x)") == {"b", "c"}
    assert await names("tier") == {"a"}
    assert await names("!app") == {"c"}
    assert await names("app in (x,y),!tier") == {"b"}


async def test_unsupported_field_selector_is_rejected(kube: SimKubeClient) -> None:
    with pytest.raises(KubeRejected, match="field label not supported"):
        await kube.list_pods(field_selector="spec.nope=1")


async def test_list_resource_version_is_the_latest_write(kube: SimKubeClient) -> None:
    created = await kube.create_pod("default", pod())
    _, rv = await kube.list_pods()
    assert rv == created["metadata"]["resourceVersion"]


async def test_merge_patch_adds_and_removes_annotations(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("a"))
    await kube.patch_pod("default", "a", {"metadata": {"annotations": {"k1": "v1", "k2": "v2"}}})
    patched = await kube.patch_pod("default", "a", {"metadata": {"annotations": {"k1": None}}})
    assert patched["metadata"]["annotations"] == {"k2": "v2"}
    assert patched["spec"]["containers"][0]["name"] == "c"


async def test_merge_patch_with_stale_resource_version_conflicts(kube: SimKubeClient) -> None:
    created = await kube.create_pod("default", pod("a"))
    stale = created["metadata"]["resourceVersion"]
    await kube.patch_pod("default", "a", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(Conflict, match="has been modified"):
        await kube.patch_pod("default", "a", {"metadata": {"resourceVersion": stale, "labels": {"x": "2"}}})


async def test_replace_with_stale_resource_version_conflicts(kube: SimKubeClient) -> None:
    created = await kube.create_pod("default", pod("a"))
    await kube.patch_pod("default", "a", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(Conflict):
        await kube.replace_pod("default", "a", created)
    fresh = await kube.get_pod("default", "a")
    assert fresh is not None
    fresh["metadata"]["labels"] = {"x": "3"}
    assert (await kube.replace_pod("default", "a", fresh))["metadata"]["labels"] == {"x": "3"}


async def test_status_changes_only_through_the_status_subresource(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("a"))
    ignored = await kube.patch_pod("default", "a", {"status": {"phase": "Running"}})
    assert ignored["status"]["phase"] == "Pending"
    running = await kube.patch_pod_status("default", "a", {"status": {"phase": "Running"},
                                                            "metadata": {"labels": {"no": "effect"}}})
    assert running["status"]["phase"] == "Running"
    assert running["metadata"]["labels"] == {}


async def test_delete_removes_and_missing_delete_is_not_found(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("a"))
    await kube.delete_pod("default", "a")
    assert await kube.get_pod("default", "a") is None
    with pytest.raises(NotFound):
        await kube.delete_pod("default", "a")


# binding ----------------------------------------------------------------------------------


async def test_bind_sets_node_and_merges_annotations_in_one_write(kube: SimKubeClient) -> None:
    created = await kube.create_pod("default", pod("a"))
    created = await kube.patch_pod("default", "a", {"metadata": {"annotations": {"keep": "me"}}})
    rv, uid = created["metadata"]["resourceVersion"], created["metadata"]["uid"]
    events = kube.watch_pods(rv, timeout_seconds=5)
    allocated = {"hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,3000,30:;"}
    await kube.bind_pod("default", "a", uid, "n1", allocated)
    [event] = await collect(events, 1)
    await events.aclose()  # type: ignore[attr-defined]
    bound = event["object"]
    assert event["type"] == "MODIFIED"
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"keep": "me", **allocated}


async def test_second_bind_conflicts(kube: SimKubeClient) -> None:
    uid = (await kube.create_pod("default", pod("a")))["metadata"]["uid"]
    await kube.bind_pod("default", "a", uid, "n1", {})
    with pytest.raises(Conflict, match="already assigned"):
        await kube.bind_pod("default", "a", uid, "n2", {})


async def test_bind_with_wrong_uid_fails_the_precondition(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("a"))
    with pytest.raises(Conflict, match="Precondition failed"):
        await kube.bind_pod("default", "a", "not-the-uid", "n1", {})
    assert (await kube.get_pod("default", "a") or {}).get("spec", {}).get("nodeName") is None


async def test_bind_missing_pod_is_not_found(kube: SimKubeClient) -> None:
    with pytest.raises(NotFound):
        await kube.bind_pod("default", "ghost", "uid", "n1", {})


# watch ------------------------------------------------------------------------------------


async def test_watch_from_rv_sees_only_later_changes(kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("before"))
    _, rv = await kube.list_pods()
    await kube.create_pod("default", pod("after"))
    await kube.delete_pod("default", "before")
    events = await collect(kube.watch_pods(rv, timeout_seconds=5), 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "after"),
                                                                              ("DELETED", "before")]


async def test_watch_sends_bookmarks_with_the_current_rv(kube: SimKubeClient) -> None:
    created = await kube.create_pod("default", pod("a"))
    [bookmark] = await collect(kube.watch_pods("1", timeout_seconds=5, field_selector="metadata.name=zzz"), 1,
                               skip_bookmarks=False)
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_watch_with_node_selector_sees_pod_arrive_and_leave(kube: SimKubeClient) -> None:
    created = await kube.create_pod("default", pod("a"))
    events = kube.watch_pods(created["metadata"]["resourceVersion"], field_selector="spec.nodeName=n1",
                             timeout_seconds=5)
    await kube.bind_pod("default", "a", created["metadata"]["uid"], "n1", {})
    await kube.patch_pod_status("default", "a", {"status": {"phase": "Running"}})
    await kube.delete_pod("default", "a")
    seen = await collect(events, 3)
    assert [e["type"] for e in seen] == ["ADDED", "MODIFIED", "DELETED"]


async def test_watch_ends_at_the_server_timeout(kube: SimKubeClient, server: SimApiServer) -> None:
    _, rv = await kube.list_pods()
    async with asyncio.timeout(10):
        seen = [e async for e in kube.watch_pods(rv, timeout_seconds=1) if e["type"] != "BOOKMARK"]
    assert seen == []


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-410"])
async def test_watch_from_a_compacted_rv_raises_gone(tmp_path: Path, as_http: bool) -> None:
    async with SimApiServer(watch=WatchSettings(gone_as_http=as_http)) as api:
        kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kc"))
        try:
            await kube.create_pod("default", pod("a"))
            await kube.create_pod("default", pod("b"))
            api.store.compact()
            with pytest.raises(Gone) as info:
                await collect(kube.watch_pods("2"), 1)
            assert info.value.code == 410
        finally:
            await kube.close()


async def test_list_and_watch_relists_after_gone_and_reports_what_it_missed(
    kube: SimKubeClient, server: SimApiServer
) -> None:
    synced = asyncio.Event()
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event in list_and_watch_pods(kube, synced=synced, timeout_seconds=30):
            seen.append((event["type"], event["object"]["metadata"]["name"]))

    await kube.create_pod("default", pod("old"))
    task = asyncio.create_task(consume(), name="consume")
    try:
        await asyncio.wait_for(synced.wait(), 10)
        await kube.create_pod("default", pod("live"))
        await wait_until(lambda: ("ADDED", "live") in seen, what="live pod seen")
        # While the consumer is cut off: a deletion, a creation, and history compacted -> 410 on re-watch.
        server.store.close_all_watches()
        server.store.delete("pods", "default", "old")
        server.store.create("pods", {**pod("new"), "metadata": {"name": "new", "namespace": "default"}})
        server.store.compact()
        await wait_until(lambda: ("DELETED", "old") in seen and ("ADDED", "new") in seen, what="re-list diff")
        assert seen[0] == ("ADDED", "old")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_list_and_watch_survives_an_api_server_restart(kube: SimKubeClient,
                                                             server: SimApiServer) -> None:
    synced = asyncio.Event()
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event in list_and_watch_pods(kube, synced=synced, timeout_seconds=30):
            seen.append((event["type"], event["object"]["metadata"]["name"]))

    task = asyncio.create_task(consume(), name="consume")
    try:
        await asyncio.wait_for(synced.wait(), 10)
        await server.stop()
        await server.start()  # same port, objects kept
        await kube.create_pod("default", pod("after-restart"))
        await wait_until(lambda: ("ADDED", "after-restart") in seen, what="event after restart")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# nodes and quotas -----------------------------------------------------------------------


async def test_nodes_create_patch_list_and_watch(kube: SimKubeClient) -> None:
    await kube.create_node({"metadata": {"name": "n1", "labels": {"gpu": "true"}}})
    nodes, rv = await kube.list_nodes()
    assert [n["metadata"]["name"] for n in nodes] == ["n1"]
    events = kube.watch_nodes(rv, timeout_seconds=5)
    handshake = {"hami.io/node-handshake": "Requesting"}
    patched = await kube.patch_node("n1", {"metadata": {"annotations": handshake}})
    assert patched["metadata"]["annotations"]["hami.io/node-handshake"] == "Requesting"
    [event] = await collect(events, 1)
    assert event["type"] == "MODIFIED" and event["object"]["metadata"]["name"] == "n1"
    status = await kube.patch_node_status("n1", {"status": {"allocatable": {"nvidia.com/gpu": "40"}}})
    assert status["status"]["allocatable"] == {"nvidia.com/gpu": "40"}
    assert (await kube.list_nodes(label_selector="gpu=true"))[0][0]["metadata"]["name"] == "n1"


async def test_resource_quota_reports_used_and_refuses_excess(kube: SimKubeClient) -> None:
    await kube.create_resource_quota("default", {"metadata": {"name": "gpu"},
                                                 "spec": {"hard": {"nvidia.com/gpu": "2"}}})
    await kube.create_pod("default", pod("a"))
    [quota] = await kube.list_resource_quotas("default")
    assert quota["status"]["used"] == {"nvidia.com/gpu": "1"}
    await kube.create_pod("default", pod("b"))
    with pytest.raises(KubeRejected, match="exceeded quota: gpu"):
        await kube.create_pod("default", pod("c"))
    await kube.patch_pod_status("default", "a", {"status": {"phase": "Succeeded"}})
    await kube.create_pod("default", pod("c"))


# errors at the boundary -----------------------------------------------------------------


async def test_unreachable_server_is_kube_unavailable(tmp_path: Path) -> None:
    api = SimApiServer()
    await api.start()
    path = api.write_kubeconfig(tmp_path / "kc")
    await api.stop()
    kube = await SimKubeClient.from_kubeconfig(path, request_timeout_s=2)
    try:
        with pytest.raises(KubeUnavailable):
            await kube.list_pods()
    finally:
        await kube.close()


async def test_malformed_bodies_and_patch_types_get_a_status(server: SimApiServer,
                                                             kube: SimKubeClient) -> None:
    await kube.create_pod("default", pod("a"))
    url = f"{server.url}/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400 and (await r.json())["reason"] == "BadRequest"
        async with http.patch(url + "/a", data=b"{}", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415 and (await r.json())["kind"] == "Status"
        bad_test = b'[{"op":"test","path":"/metadata/name","value":"b"}]'
        json_patch = {"Content-Type": "application/json-patch+json"}
        async with http.patch(url + "/a", data=bad_test, headers=json_patch) as r:
            assert r.status == 422 and "test failed" in (await r.json())["message"]
        ok = b'[{"op":"add","path":"/metadata/labels/a~1b","value":"1"}]'
        async with http.patch(url + "/a", data=ok, headers=json_patch) as r:
            assert r.status == 200 and (await r.json())["metadata"]["labels"] == {"a/b": "1"}


@needs_kubectl
async def test_kubectl_get_pods_and_nodes_with_the_kubeconfig(kube: SimKubeClient, server: SimApiServer,
                                                              tmp_path: Path) -> None:
    await kube.create_pod("default", pod("visible"))
    await kube.create_node({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready",
                                                                                    "status": "True"}]}})
    code, out, err = await kubectl(server.write_kubeconfig(tmp_path / "kubectl-config"), "get", "pods,nodes")
    assert code == 0, err
    assert "visible" in out and "Pending" in out and "Ready" in out


@needs_kubectl
async def test_kubectl_get_all_lists_pods(kube: SimKubeClient, server: SimApiServer, tmp_path: Path) -> None:
    """Pods are in the ``all`` category (discovery), as on a real server."""
    await kube.create_pod("default", pod("in-all"))
    code, out, err = await kubectl(server.write_kubeconfig(tmp_path / "kubeconfig"), "get", "all")
    assert code == 0, err
    assert "in-all" in out and "Pending" in out


@needs_kubectl
async def test_kubectl_create_namespace_sends_protobuf_and_is_told_how_to_do_it(
    server: SimApiServer, tmp_path: Path
) -> None:
    """``kubectl create namespace|quota`` send protobuf, which the stand-in does not decode: a 415
    that says what to do instead (not "the body is not valid JSON"), and the YAML route works."""
    config = server.write_kubeconfig(tmp_path / "kubeconfig")
    code, _, err = await kubectl(config, "create", "namespace", "team-a")
    assert code != 0
    assert "speaks JSON only" in err and "kubectl apply -f" in err, err
    code, manifest, err = await kubectl(config, "create", "namespace", "team-a", "--dry-run=client",
                                        "-o", "yaml")
    assert code == 0, err
    code, out, err = await kubectl(config, "apply", "-f", "-", stdin=manifest)
    assert code == 0, err
    assert "namespace/team-a created" in out


async def test_a_proxy_from_the_environment_still_applies_to_the_api_server(
    server: SimApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-request environment lookups are skipped only where no proxy applies: with one set
    (here a dead one), requests go through it and fail as unavailable instead of bypassing it."""
    for name in ("no_proxy", "NO_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    proxied = await SimKubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "proxied"))
    try:
        with pytest.raises(KubeUnavailable):
            await proxied.get_pod("default", "any")
        with pytest.raises(KubeUnavailable):  # the hot writes too (KubeClient._send)
            await proxied.bind_pod("default", "any", "uid", "node-1", {})
        with pytest.raises(KubeUnavailable):
            await proxied.patch_pod("default", "any", {"metadata": {"labels": {"a": "b"}}})
    finally:
        await proxied.close()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    direct = await SimKubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "direct"))
    try:
        assert await direct.get_pod("default", "any") is None
    finally:
        await direct.close()


async def test_bind_and_patch_send_the_configured_token_agent_and_content_types(tmp_path: Path) -> None:
    """The per-pod writes skip the generated client's request building, not its auth: the token
    of the kubeconfig, its User-Agent, the merge-patch content type and quoted paths arrive."""
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.method, request.raw_path, dict(request.headers), await request.read()))
        return web.json_response({"kind": "Status", "status": "Success"}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = tmp_path / "kubeconfig"
    config.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: s3cret}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    client = await KubeClient.from_kubeconfig(config)
    try:
        await client.bind_pod("team a", "p/1", "uid-1", "node-1", {"hami.io/bind-phase": "allocating"})
        await client.patch_pod("default", "p", {"metadata": {"annotations": {"k": "v"}}})
    finally:
        await client.close()
        await runner.cleanup()
    (bind_method, bind_path, bind_headers, bind_body), patch = seen
    patch_method, patch_path, patch_headers, patch_body = patch
    assert (bind_method, bind_path) == ("POST", "/api/v1/namespaces/team%20a/pods/p%2F1/binding")
    assert (patch_method, patch_path) == ("PATCH", "/api/v1/namespaces/default/pods/p")
    for headers in (bind_headers, patch_headers):
        assert headers["Authorization"] == "Bearer s3cret"
        assert headers["User-Agent"].startswith("OpenAPI-Generator/")
        assert headers["Accept"] == "application/json"
    assert bind_headers["Content-Type"] == "application/json"
    assert patch_headers["Content-Type"] == "application/merge-patch+json"
    assert json.loads(bind_body) == {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p/1", "namespace": "team a", "uid": "uid-1",
                     "annotations": {"hami.io/bind-phase": "allocating"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}
    assert json.loads(patch_body) == {"metadata": {"annotations": {"k": "v"}}}
