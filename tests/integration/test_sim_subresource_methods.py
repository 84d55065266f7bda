"""A method that a subresource does not serve is the real server's 405, over HTTP on loopback.

The routes of the subresources are made from their discovery verbs (``subresources.SUBRESOURCES``),
one HTTP method each; any other method on the same path is refused as a real API server refuses it:
405 with a ``metav1.Status`` (reason MethodNotAllowed), and nothing changes. Case matrix: DELETE and
POST on ``pods/p/status``, DELETE on ``nodes/n/status``, PUT on ``pods/p/log``, GET on
``pods/p/binding`` and on the namespace's ``bindings`` collection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from gpubus_local.sim.apiserver import SimApiServer

POD = "/api/v1/namespaces/default/pods/p"
NODE = "/api/v1/nodes/n"
OBJECTS = (
    ("/api/v1/namespaces/default/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    ("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
)


@pytest.fixture
async def api() -> AsyncIterator[tuple[SimApiServer, aiohttp.ClientSession]]:
    async with (SimApiServer() as server,
                aiohttp.ClientSession(base_url=server.url, timeout=aiohttp.ClientTimeout(total=20)) as http):
        for path, body in OBJECTS:
            async with http.post(path, json=body) as r:
                assert r.status == 201, await r.text()
        yield server, http


@pytest.mark.parametrize(("method", "path"), [
    ("DELETE", f"{POD}/status"), ("POST", f"{POD}/status"), ("DELETE", f"{NODE}/status"),
    ("PUT", f"{POD}/log"), ("GET", f"{POD}/binding"), ("GET", "/api/v1/namespaces/default/bindings"),
])
async def test_a_method_a_subresource_does_not_serve_is_a_405_status_and_changes_nothing(
    api: tuple[SimApiServer, aiohttp.ClientSession], method: str, path: str
) -> None:
    server, http = api
    rv = server.store.rv
    async with http.request(method, path, json={}) as r:
        status, body = r.status, await r.read()
    assert status == 405, body
    answer: dict[str, Any] = orjson.loads(body)
    assert (answer["kind"], answer["apiVersion"], answer["status"]) == ("Status", "v1", "Failure")
    assert (answer["code"], answer["reason"]) == (405, "MethodNotAllowed"), answer
    assert isinstance(answer.get("message"), str) and answer["message"]
    assert server.store.rv == rv
    assert server.store.find("pods", "default", "p") is not None
    assert server.store.find("nodes", "", "n") is not None
