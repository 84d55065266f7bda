"""The SimApiServer against hostile and malformed client input, over real HTTP on loopback.

Every failure must be a ``metav1.Status`` (kind Status, apiVersion v1, status Failure, reason,
code, message) with the real server's code, and nothing refused may be stored or break a later
request. Case matrix:

- watch ``timeoutSeconds``: nan, inf, abc, -1, 1.5 -> 400, and other watches keep their timers;
- any unexpected exception -> 500 InternalError Status (the middleware's last resort);
- bodies nested deeper than the server can write back -> 400 (create, merge patch, JSON patch);
  the deepest body it accepts is served by get, list, Table and watch;
- wrong JSON types -> 400 (names, generateName, labels, annotations, resourceVersion, Binding
  target/metadata, status conditions, resources, quantities, quota ``spec.hard``, DeleteOptions),
  after which label-selector lists, Tables, quota reads and pod creates all still answer 200/201;
- unusable values -> 422 (merge patch nulling ``spec`` or ``containers``, metadata replaced);
- DELETE preconditions checked against the object as deleted, after a concurrent update -> 409;
- names: not DNS-1123 (subdomain; namespaces a label of at most 63) -> 422;
- body vs URL: PUT name/namespace, create namespace, Binding name -> 400; cluster-scoped objects
  never keep a body's namespace;
- PATCH with an unknown content type -> 415 whatever the body; JSON patch ``test`` is type-aware.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpubus_local.sim.apiserver import SimApiServer, status_errors
from gpubus_local.sim.handlers import WatchSettings

PODS = "/api/v1/namespaces/default/pods"
NODES = "/api/v1/nodes"
QUOTAS = "/api/v1/namespaces/default/resourcequotas"
NO_QUOTA_PODS = "/api/v1/namespaces/kube-public/pods"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}


def pod(name: Any = "p", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


class Api:
    """Raw requests against one server: (HTTP status, decoded JSON body or None)."""

    def __init__(self, http: aiohttp.ClientSession, server: SimApiServer) -> None:
        self.http, self.server = http, server

    async def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                   content_type: str = "application/json", headers: dict[str, str] | None = None
                   ) -> tuple[int, Any]:
        # json, not orjson: these bodies may nest deeper than orjson writes
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": content_type} if data is not None else {}
        async with self.http.request(method, self.server.url + path, data=data,
                                     headers={**sent, **(headers or {})}) as r:
            text = await r.read()
            try:
                return r.status, orjson.loads(text)
            except orjson.JSONDecodeError:
                return r.status, text.decode(errors="replace")

    async def refused(self, code: int, reason: str, method: str, path: str, body: Any = None,
                      **kw: Any) -> dict[str, Any]:
        status, answer = await self.call(method, path, body, **kw)
        assert status == code, answer
        assert_status(answer, code, reason)
        return dict(answer)


def assert_status(answer: Any, code: int, reason: str) -> None:
    assert isinstance(answer, dict), answer
    assert (answer.get("kind"), answer.get("apiVersion"), answer.get("status")) == ("Status", "v1", "Failure")
    assert (answer.get("code"), answer.get("reason")) == (code, reason), answer
    assert isinstance(answer.get("message"), str) and answer["message"]


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with (SimApiServer(watch=WatchSettings(bookmark_interval_s=0.2)) as server,
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http):
        yield Api(http, server)


async def read_watch(api: Api, query: str) -> list[dict[str, Any]]:
    """Every event of a watch that the server must end by itself."""
    async with asyncio.timeout(15), api.http.get(f"{api.server.url}{PODS}?watch=1&{query}") as r:
        assert r.status == 200
        return [orjson.loads(line) async for line in r.content if line.strip()]


# watch timeoutSeconds ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "abc", "-1", "1.5", "1e3"])
async def test_watch_timeout_that_is_not_a_non_negative_integer_is_a_400(api: Api, value: str) -> None:
    await api.refused(400, "BadRequest", "GET", f"{PODS}?watch=1&timeoutSeconds={value}")


async def test_a_refused_nan_timeout_leaves_other_watches_their_bookmarks_and_timeouts(api: Api) -> None:
    async with api.http.get(f"{api.server.url}{PODS}?watch=1&timeoutSeconds=nan") as r:
        assert r.status == 400
    events = await read_watch(api, "timeoutSeconds=1&allowWatchBookmarks=true")
    assert events and {e["type"] for e in events} == {"BOOKMARK"}


# Table requests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [PODS, f"{PODS}/p"])
async def test_an_unknown_include_object_of_a_table_is_a_400_naming_the_supported_values(
    populated: Api, path: str
) -> None:
    answer = await populated.refused(400, "BadRequest", "GET", f"{path}?includeObject=Everything",
                                     headers=TABLE)
    assert '"Metadata", "None", "Object"' in answer["message"]
    status, table = await populated.call("GET", f"{path}?includeObject=Object", headers=TABLE)
    assert status == 200 and table["rows"][0]["object"]["metadata"]["name"] == "p"


# the last resort ----------------------------------------------------------------------------------


async def test_an_unexpected_error_is_a_500_internal_error_status() -> None:
    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app = web.Application(middlewares=[status_errors])
    app.router.add_get("/broken", broken)
    async with (TestServer(app) as server, aiohttp.ClientSession() as http,
                http.get(server.make_url("/broken")) as r):
        assert r.status == 500 and r.content_type == "application/json"
        answer = await r.json()
    assert_status(answer, 500, "InternalError")
    assert "a bug" not in answer["message"]  # no internals (or tracebacks) in what a client sees


# nesting -------------------------------------------------------------------------------------------


async def test_a_body_nested_deeper_than_the_server_can_write_is_refused_and_not_stored(api: Api) -> None:
    deep = pod("deep")
    deep["spec"]["extra"] = nested(300)
    await api.refused(400, "BadRequest", "POST", PODS, deep)
    await api.refused(404, "NotFound", "GET", f"{PODS}/deep")
    assert (await api.call("GET", PODS))[0] == 200
    assert (await api.call("POST", PODS, pod("p")))[0] == 201
    await api.refused(400, "BadRequest", "PATCH", f"{PODS}/p", {"spec": {"extra": nested(300)}},
                      content_type=MERGE)
    # in a status condition: a pod's spec may not change once created, and only fields that a real
    # server keeps are stored (a PodCondition's are not checked)
    shallower = {"status": {"conditions": [{"type": "X", "status": "True", "extra": nested(100)}]}}
    assert (await api.call("PATCH", f"{PODS}/p/status", shallower, content_type=MERGE))[0] == 200
    deeper = [{"op": "add", "path": "/status/conditions/0/extra" + "/a" * 100,
               "value": nested(200)}]  # each half fits
    await api.refused(400, "BadRequest", "PATCH", f"{PODS}/p/status", deeper, content_type=JSON_PATCH)
    status, stored = await api.call("GET", f"{PODS}/p")
    assert status == 200 and stored["status"]["conditions"][0]["extra"] == nested(100)


async def test_the_deepest_body_the_server_accepts_is_served_everywhere(api: Api) -> None:
    depth = 300
    while True:
        body = pod("deepest")
        body["spec"]["extra"] = nested(depth)
        status, _ = await api.call("POST", PODS, body)
        if status == 201:
            break
        assert status == 400
        depth -= 1
    assert depth > 200
    assert (await api.call("GET", f"{PODS}/deepest"))[0] == 200
    assert (await api.call("GET", PODS))[0] == 200
    assert (await api.call("GET", "/api/v1/pods", headers=TABLE))[0] == 200
    events = await read_watch(api, "timeoutSeconds=1")
    assert [e["object"]["metadata"]["name"] for e in events] == ["deepest"]


# wrong JSON types ---------------------------------------------------------------------------------


def with_container(**fields: Any) -> dict[str, Any]:
    body = pod("bad")
    body["spec"]["containers"][0].update(fields)
    return body


WRONG_TYPES: list[tuple[str, str, Any, str]] = [
    ("POST", PODS, pod(123), "application/json"),
    ("POST", PODS, pod(["x"]), "application/json"),
    ("POST", PODS, {"metadata": {"generateName": 5}, "spec": pod()["spec"]}, "application/json"),
    ("POST", "/api/v1/namespaces", {"metadata": {"name": 1}}, "application/json"),
    ("POST", PODS, pod("bad", labels="app=x"), "application/json"),
    ("POST", PODS, pod("bad", labels={"app": 1}), "application/json"),
    ("POST", PODS, pod("bad", annotations=["a"]), "application/json"),
    ("POST", PODS, with_container(resources="x"), "application/json"),
    ("POST", NO_QUOTA_PODS, with_container(resources={"requests": {"cpu": "lots"}}), "application/json"),
    ("POST", NO_QUOTA_PODS, with_container(resources={"limits": {"cpu": True}}), "application/json"),
    ("POST", QUOTAS, {"metadata": {"name": "q"}, "spec": {"hard": "x"}}, "application/json"),
    ("POST", QUOTAS, {"metadata": {"name": "q"}, "spec": {"hard": {"cpu": "lots"}}}, "application/json"),
    ("POST", NODES, {"metadata": {"name": "n2"}, "spec": "x"}, "application/json"),
    ("POST", f"{PODS}/p/binding", {"metadata": {"name": "p"}, "target": "n1"}, "application/json"),
    ("POST", f"{PODS}/p/binding", {"metadata": "x", "target": {"name": "n1"}}, "application/json"),
    ("POST", "/api/v1/namespaces/default/bindings", {"metadata": "p", "target": {"name": "n1"}},
     "application/json"),
    ("POST", f"{PODS}/p/binding", {"metadata": {"name": "p", "annotations": "a"}, "target": {"name": "n1"}},
     "application/json"),
    ("PATCH", f"{PODS}/p", {"metadata": {"labels": "app=x"}}, MERGE),
    ("PATCH", f"{PODS}/p", {"metadata": {"resourceVersion": 5}}, MERGE),
    ("PATCH", f"{PODS}/p", {"spec": {"containers": [{"name": "c", "image": "i", "resources": "x"}]}}, MERGE),
    ("PATCH", f"{PODS}/p/status", {"status": {"conditions": "x"}}, MERGE),
    ("PATCH", f"{PODS}/p/status", {"status": {"conditions": [{"type": ["PodScheduled"]}]}}, MERGE),
    ("PATCH", f"{PODS}/p/status", {"status": "Running"}, MERGE),
    ("PATCH", f"{PODS}/p/status", {"status": {"phase": ["Succeeded"]}}, MERGE),
    ("PATCH", "/api/v1/nodes/n1/status", {"status": {"conditions": ["x"]}}, MERGE),
    ("PATCH", "/api/v1/nodes/n1/status", {"status": {"conditions": [{"type": "Ready", "status": True}]}},
     MERGE),
    ("PATCH", f"{QUOTAS}/q1", {"spec": {"hard": "x"}}, MERGE),
    ("PUT", "/api/v1/nodes/n1", {"metadata": {"name": "n1"}, "spec": "x"}, "application/json"),
    ("DELETE", f"{PODS}/p", {"preconditions": "x"}, "application/json"),
    ("DELETE", f"{PODS}/p", {"preconditions": {"resourceVersion": 1}}, "application/json"),
]


@pytest.mark.parametrize("quantity", ["1e3", "1.5E-2", "100m", "5n", "2u", "3P", "1Ei", ".5", "+2k"])
async def test_every_form_of_the_quantity_grammar_is_accepted(api: Api, quantity: str) -> None:
    # with a quota in the namespace every quantity is parsed; the real server takes all of these
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"cpu": "1e19"}}}
    assert (await api.call("POST", QUOTAS, quota))[0] == 201
    assert (await api.call("POST", PODS, with_container(resources={"limits": {"cpu": quantity}})))[0] == 201


@pytest.fixture
async def populated(api: Api) -> Api:
    """A pod ``p``, a Ready node ``n1`` and a quota ``q1``: what the refused writes aim at."""
    for path, body in ((PODS, pod("p", labels={"app": "x"})), (QUOTAS, {"metadata": {"name": "q1"},
                       "spec": {"hard": {"pods": "50", "cpu": "10"}}}),
                       (NODES, {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready",
                                                                                       "status": "True"}]}})):
        assert (await api.call("POST", path, body))[0] == 201
    return api


@pytest.mark.parametrize(("method", "path", "body", "content_type"), WRONG_TYPES)
async def test_a_wrong_json_type_is_a_400_and_breaks_nothing_later(
    populated: Api, method: str, path: str, body: Any, content_type: str
) -> None:
    api = populated
    await api.refused(400, "BadRequest", method, path, body, content_type=content_type)
    for read in (f"{PODS}?labelSelector=app%3Dx", "/api/v1/pods?labelSelector=app", QUOTAS, f"{QUOTAS}/q1"):
        assert (await api.call("GET", read))[0] == 200, read
    assert (await api.call("POST", QUOTAS.replace("default", "kube-public"), {
        "metadata": {"name": "q"}, "spec": {"hard": {"cpu": "1"}}}))[0] == 201
    assert (await api.call("GET", "/api/v1/resourcequotas"))[0] == 200
    for read in (PODS, NODES):
        assert (await api.call("GET", read, headers=TABLE))[0] == 200, read
    for pods in (PODS, NO_QUOTA_PODS):
        assert (await api.call("POST", pods, pod("after")))[0] == 201, pods
    assert (await api.call("POST", f"{PODS}/p/binding", {"metadata": {"name": "p"},
                                                          "target": {"name": "n1"}}))[0] == 201


@pytest.mark.parametrize("patch", [{"spec": None}, {"spec": {"containers": None}}, {"metadata": "x"},
                                   {"spec": {"containers": [{"name": "c"}]}}])
async def test_a_merge_patch_leaving_a_pod_unusable_is_invalid(populated: Api, patch: Any) -> None:
    api = populated
    await api.refused(422, "Invalid", "PATCH", f"{PODS}/p", patch, content_type=MERGE)
    assert (await api.call("POST", f"{PODS}/p/binding", {"metadata": {"name": "p"},
                                                          "target": {"name": "n1"}}))[0] == 201


# DELETE preconditions ---------------------------------------------------------------------------


async def test_delete_preconditions_hold_for_the_object_as_deleted_not_as_first_read(api: Api) -> None:
    _, created = await api.call("POST", PODS, pod("victim"))
    options = orjson.dumps({"kind": "DeleteOptions", "apiVersion": "v1",
                            "preconditions": {"resourceVersion": created["metadata"]["resourceVersion"]}})
    reader, writer = await asyncio.open_connection(api.server.host, api.server.port)
    try:
        writer.write(f"DELETE {PODS}/victim HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(options)}\r\nConnection: close\r\n\r\n".encode() + options[:10])
        await writer.drain()
        status, _ = await api.call("PATCH", f"{PODS}/victim", {"metadata": {"labels": {"changed": "yes"}}},
                                   content_type=MERGE)
        assert status == 200
        writer.write(options[10:])
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 409")
    assert (await api.call("GET", f"{PODS}/victim"))[0] == 200


# names and identity --------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "name"), [
    (PODS, "a..b"), (PODS, "a.-b"), (PODS, "-a"), (PODS, "nl\n"), (PODS, "A"), (PODS, "x" * 254),
    (NODES, "n_1"), ("/api/v1/namespaces", "a.b"), ("/api/v1/namespaces", "n" * 64),
])
async def test_a_name_that_is_not_dns_1123_is_invalid(api: Api, path: str, name: str) -> None:
    body = pod(name) if path == PODS else {"metadata": {"name": name}}
    await api.refused(422, "Invalid", "POST", path, body)


@pytest.mark.parametrize(("path", "name"), [(PODS, "a.b-c.d"), ("/api/v1/namespaces", "n" * 63)])
async def test_a_dns_1123_name_is_accepted(api: Api, path: str, name: str) -> None:
    body = pod(name) if path == PODS else {"metadata": {"name": name}}
    assert (await api.call("POST", path, body))[0] == 201


async def test_a_put_body_names_the_object_of_its_url(populated: Api) -> None:
    api = populated
    _, stored = await api.call("GET", f"{PODS}/p")
    answer = await api.refused(400, "BadRequest", "PUT", f"{PODS}/p", {**stored, "metadata": {
        **stored["metadata"], "name": "other"}})
    assert answer["message"] == "the name of the object (other) does not match the name on the URL (p)"
    await api.refused(400, "BadRequest", "PUT", f"{PODS}/p", {**stored, "metadata": {
        **stored["metadata"], "namespace": "kube-system"}})
    assert (await api.call("GET", f"{PODS}/p"))[1] == stored
    await api.refused(404, "NotFound", "GET", f"{PODS}/other")


async def test_a_create_or_binding_naming_another_object_than_its_url_is_a_400(populated: Api) -> None:
    api = populated
    elsewhere = {"metadata": {"name": "q2", "namespace": "kube-system"}, "spec": {"hard": {"pods": "1"}}}
    await api.refused(400, "BadRequest", "POST", QUOTAS, elsewhere)
    await api.refused(404, "NotFound", "GET", "/api/v1/namespaces/kube-system/resourcequotas/q2")
    await api.refused(400, "BadRequest", "POST", f"{PODS}/p/binding",
                      {"metadata": {"name": "zzz"}, "target": {"name": "n1"}})
    _, stored = await api.call("GET", f"{PODS}/p")
    assert "nodeName" not in stored["spec"]


async def test_a_cluster_scoped_object_never_keeps_a_namespace_from_its_body(api: Api) -> None:
    assert (await api.call("POST", NODES, {"metadata": {"name": "n1", "namespace": "x"}}))[0] == 201
    status, node = await api.call("PUT", f"{NODES}/n1", {"metadata": {"name": "n1", "namespace": "x"}})
    assert status == 200 and "namespace" not in node["metadata"]
    status, node = await api.call("GET", f"{NODES}/n1")
    assert status == 200 and "namespace" not in node["metadata"]


# patches ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/apply-patch+yaml", "text/plain", "application/json"])
async def test_a_patch_of_an_unknown_type_is_a_415_whatever_its_body(populated: Api, content_type: str
                                                                     ) -> None:
    yaml = b"metadata:\n  labels: {a: b}\n"
    await populated.refused(415, "UnsupportedMediaType", "PATCH", f"{PODS}/p", raw=yaml,
                            content_type=content_type)


async def test_json_patch_test_does_not_take_false_for_zero(populated: Api) -> None:
    api = populated
    ops = [{"op": "test", "path": "/spec/priority", "value": False},
           {"op": "add", "path": "/metadata/labels/t", "value": "passed"}]
    await api.refused(422, "Invalid", "PATCH", f"{PODS}/p", ops, content_type=JSON_PATCH)
    ops[0]["value"] = 0.0
    status, patched = await api.call("PATCH", f"{PODS}/p", ops, content_type=JSON_PATCH)
    assert status == 200 and patched["metadata"]["labels"]["t"] == "passed"


async def test_a_compressed_body_is_read_as_sent_and_is_not_json(api: Api) -> None:
    for data in (gzip.compress(orjson.dumps(pod("zipped"))), b"not-compressed-at-all"):
        await api.refused(400, "BadRequest", "POST", PODS, raw=data, headers={"Content-Encoding": "gzip"})
    await api.refused(404, "NotFound", "GET", f"{PODS}/zipped")
