"""Dry runs and write options of the SimApiServer's less common verbs, over real HTTP on loopback.

Nothing a dry run answers may be stored: the store's objects and its resourceVersion stay as they were.
Case matrix:

- DELETE of a namespace with ``dryRun=All`` (query, or a DeleteOptions body) answers the namespace and
  deletes nothing: neither it nor the pods, quotas and events in it; a real delete removes them all;
- DELETE collection with ``dryRun=All`` (query or body) answers the pods it would delete and deletes
  none; another dryRun value is the real 422 on DeleteOptions and deletes none;
- POST ``pods/{name}/binding``: ``dryRun=All`` answers 201 and leaves the pod unbound; a bad dryRun or
  fieldValidation value is the 422 on CreateOptions; ``fieldValidation=Strict`` refuses a Binding
  with an unknown field (400, the decoder's strict error), dry run or not, and binds nothing; Warn
  binds with one Warning header, Ignore silently;
- a pod create or update writing a wrong JSON type into a field an update may change (scheduling
  gates, ``activeDeadlineSeconds``) is the decoder's 400 and stores nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.handlers import WatchSettings

NS = "team-a"
PODS = f"/api/v1/namespaces/{NS}/pods"
BINDING = f"{PODS}/p/binding"
MERGE = "application/merge-patch+json"


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def binding(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n1"},
            **extra}


class Api:
    def __init__(self, http: aiohttp.ClientSession, server: SimApiServer) -> None:
        self.http, self.server = http, server

    async def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
                   ) -> tuple[int, Any, list[str]]:
        """(HTTP status, decoded body, Warning headers)."""
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.http.request(method, self.server.url + path, data=data, headers=headers) as r:
            return r.status, orjson.loads(await r.read()), r.headers.getall("Warning", [])

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, answer, _ = await self.call(method, path, body, **kw)
        assert status in (200, 201), answer
        return answer

    def names(self, resource: str, namespace: str | None = NS) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.server.store.items(resource, namespace))


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with (SimApiServer(watch=WatchSettings(bookmark_interval_s=0.2)) as server,
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http):
        api = Api(http, server)
        await api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        for name in ("p", "q"):
            await api.ok("POST", PODS, pod(name))
        await api.ok("POST", f"/api/v1/namespaces/{NS}/resourcequotas",
                     {"metadata": {"name": "quota"}, "spec": {"hard": {"pods": "10"}}})
        await api.ok("POST", f"/api/v1/namespaces/{NS}/events", {
            "metadata": {"name": "e1"}, "reason": "Tested", "message": "m", "type": "Normal",
            "involvedObject": {"kind": "Pod", "namespace": NS, "name": "p"}})
        yield api


def snapshot(api: Api) -> tuple[int, list[str], list[str], list[str], list[str]]:
    return (api.server.store.rv, api.names("namespaces", None), api.names("pods"),
            api.names("resourcequotas"), api.names("events"))


# DELETE of a namespace ------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "body"), [("?dryRun=All", None),
                                             ("", {"kind": "DeleteOptions", "dryRun": ["All"]})])
async def test_a_dry_run_delete_of_a_namespace_deletes_nothing_in_it(api: Api, query: str, body: Any) -> None:
    before = snapshot(api)
    assert NS in before[1] and before[2:] == (["p", "q"], ["quota"], ["e1"])
    answer = await api.ok("DELETE", f"/api/v1/namespaces/{NS}{query}", body)
    assert (answer["kind"], answer["metadata"]["name"]) == ("Namespace", NS)
    assert snapshot(api) == before


async def test_a_real_delete_of_a_namespace_deletes_what_is_in_it(api: Api) -> None:
    await api.ok("DELETE", f"/api/v1/namespaces/{NS}")
    assert NS not in api.names("namespaces", None)
    assert (api.names("pods"), api.names("resourcequotas"), api.names("events")) == ([], [], [])


# DELETE collection --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("query", "body"), [("?dryRun=All", None),
                                             ("", {"kind": "DeleteOptions", "dryRun": ["All"]})])
async def test_a_dry_run_delete_collection_answers_the_pods_and_deletes_none(
    api: Api, query: str, body: Any
) -> None:
    before = snapshot(api)
    answer = await api.ok("DELETE", f"{PODS}{query}", body)
    assert answer["kind"] == "PodList"
    assert sorted(item["metadata"]["name"] for item in answer["items"]) == ["p", "q"]
    assert snapshot(api) == before


async def test_a_bad_dry_run_of_a_delete_collection_is_the_422_and_deletes_none(api: Api) -> None:
    before = snapshot(api)
    status, answer, _ = await api.call("DELETE", f"{PODS}?dryRun=Some")
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["message"] == ('DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                                 '[]string{"Some"}: supported values: "All"')
    assert snapshot(api) == before


# pods/binding ---------------------------------------------------------------------------------------------


def node_name(api: Api) -> Any:
    return api.server.store.get("pods", NS, "p")["spec"].get("nodeName")


async def test_a_dry_run_binding_answers_201_and_binds_nothing(api: Api) -> None:
    before = snapshot(api)
    status, answer, _ = await api.call("POST", f"{BINDING}?dryRun=All", binding())
    assert (status, answer["status"]) == (201, "Success")
    assert node_name(api) is None and snapshot(api) == before
    await api.ok("POST", BINDING, binding())  # the pod is still bindable
    assert node_name(api) == "n1"


@pytest.mark.parametrize(("query", "field"), [("dryRun=Some", "dryRun"), ("fieldValidation=strict",
                                                                            "fieldValidation")])
async def test_a_bad_binding_option_is_the_422_on_create_options(api: Api, query: str, field: str) -> None:
    status, answer, _ = await api.call("POST", f"{BINDING}?{query}", binding())
    assert (status, answer["reason"]) == (422, "Invalid")
    assert answer["message"].startswith(f'CreateOptions.meta.k8s.io "" is invalid: {field}: Unsupported '
                                        "value")
    assert node_name(api) is None


@pytest.mark.parametrize("query", ["fieldValidation=Strict", "fieldValidation=Strict&dryRun=All"])
async def test_a_strict_binding_with_an_unknown_field_is_refused_and_binds_nothing(api: Api, query: str
                                                                                   ) -> None:
    before = snapshot(api)
    status, answer, _ = await api.call("POST", f"{BINDING}?{query}", binding(bogus=1))
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"] == ('Binding in version "v1" cannot be handled as a Binding: strict decoding '
                                 'error: unknown field "bogus"')
    assert node_name(api) is None and snapshot(api) == before


@pytest.mark.parametrize(("query", "warnings"), [
    ("fieldValidation=Warn", ['299 - "unknown field \\"bogus\\""']),
    ("fieldValidation=Ignore", []),
])
async def test_a_lenient_binding_with_an_unknown_field_binds(api: Api, query: str, warnings: list[str]
                                                             ) -> None:
    status, _, sent = await api.call("POST", f"{BINDING}?{query}", binding(bogus=1))
    assert (status, sent) == (201, warnings)
    assert node_name(api) == "n1"


async def test_a_strict_binding_without_unknown_fields_binds(api: Api) -> None:
    await api.ok("POST", f"{BINDING}?fieldValidation=Strict", binding())
    assert node_name(api) == "n1"


# wrong JSON types in the fields an update may change ----------------------------------------------------


@pytest.mark.parametrize("spec", [{"schedulingGates": ["g1"]}, {"activeDeadlineSeconds": 1.5},
                                  {"activeDeadlineSeconds": True}])
async def test_a_wrong_json_type_in_an_updatable_field_is_a_400_and_not_stored(api: Api, spec: dict[str, Any]
                                                                               ) -> None:
    before = snapshot(api)
    status, answer, _ = await api.call("POST", PODS, pod("bad", **spec))
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert "cannot unmarshal" in answer["message"]
    status, answer, _ = await api.call("PATCH", f"{PODS}/p", {"spec": spec}, content_type=MERGE)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert "cannot unmarshal" in answer["message"]
    assert snapshot(api) == before
    assert "schedulingGates" not in api.server.store.get("pods", NS, "p")["spec"]
