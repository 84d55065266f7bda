"""The OpenAPI v3 documents of the simulated API server (``gpubus_local.sim.openapi``) and the core/v1
table behind them (``gpubus_local.sim.corev1``).

Case matrix:
- paths: every route the server registers under ``/api/v1/`` is in the document with the same
  method, an ``x-kubernetes-action`` and the GVK of its kind, and the document names nothing else;
  discovery lists exactly the served subresources and collections, with the verbs they are served with;
- kubectl's check: every PATCH operation of every kind lists ``fieldValidation`` among its own
  parameters; PATCH bodies are JSON and merge patches only (so kubectl computes strategic patches
  from its own types); every write (POST, PUT, PATCH, DELETE, deletecollection) and no read lists
  ``dryRun``;
- schemas: every ``$ref`` resolves; each kind and its list have a component with their GVK; a kind
  added to the served resources gets its paths and a generic, open schema; the GPU resource names
  are documented where ``kubectl explain`` shows them;
- the table against the real Kubernetes v1.33 schema: every described type has exactly the real
  field names, types and required fields; every opaque type exists there;
- hash: upper-case hex SHA-512 of the document bytes, in the root's URL; the same input gives the
  same bytes, another input another hash;
- v2: a valid, empty document as JSON and as gnostic's protobuf;
- serving helpers: ``Accept`` negotiation (v3 JSON; v2 protobuf or JSON) and ``If-None-Match``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import orjson
import pytest

from gpubus_local.sim import corev1, openapi
from gpubus_local.sim.apiserver import SimApiServer, _discovery_v1
from gpubus_local.sim.kinds import KINDS, NAMESPACED
from gpubus_local.sim.tokens import TOKEN_REQUEST_PATH

METHODS = ("get", "put", "post", "patch", "delete")
ACTIONS = {"get": {"get", "list"}, "put": {"put"}, "post": {"post"}, "patch": {"patch"},
           "delete": {"delete", "deletecollection"}}
REAL_DEFS = (Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / "v1.33.0-local"
             / "_definitions.json")


def build(kinds: dict[str, str] | None = None, namespaced: frozenset[str] = NAMESPACED) -> openapi.OpenApi:
    return openapi.build(kinds or KINDS, namespaced)


def api_v1(docs: openapi.OpenApi | None = None) -> dict[str, Any]:
    return orjson.loads((docs or build()).groups["api/v1"].body)  # type: ignore[no-any-return]


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def served_kind(path: str) -> str:
    parts = path.removeprefix("/api/v1/").split("/")
    if parts[0] == "namespaces" and len(parts) > 2 and parts[1] == "{namespace}":
        parts = parts[2:]
    return "Binding" if parts[0] == "bindings" or parts[-1] == "binding" else KINDS[parts[0]]


# -- paths --------------------------------------------------------------------------------------


def served_routes(server: SimApiServer) -> set[tuple[str, str]]:
    """(path as the document writes it, method) of every route under ``/api/v1/`` but TokenRequest's,
    which per-node identity needs and discovery and the (frozen) document leave out."""
    return {(route.resource.canonical.replace("{ns}", "{namespace}"), route.method.lower())
            for route in server.app().router.routes()
            if route.resource is not None and route.resource.canonical.startswith("/api/v1/")
            and route.resource.canonical != TOKEN_REQUEST_PATH and route.method != "HEAD"}


def test_every_served_route_is_in_the_document_with_its_action_and_gvk() -> None:
    server = SimApiServer()
    served = served_routes(server)
    doc = api_v1(server.openapi)
    documented = {(path, method) for path, method, _ in operations(doc)}
    assert documented == served
    for path, method, op in operations(doc):
        assert op["x-kubernetes-action"] in ACTIONS[method], (path, method)
        gvk = op["x-kubernetes-group-version-kind"]
        assert gvk == {"group": "", "kind": served_kind(path), "version": "v1"}


def test_discovery_lists_each_served_subresource_and_collection_with_the_verbs_it_is_served_with() -> None:
    """Discovery, the routes and the document are made from one table; they cannot drift apart."""
    methods = {"create": "post", "get": "get", "update": "put", "patch": "patch"}
    served = served_routes(SimApiServer())
    listed = [entry for entry in _discovery_v1()["resources"] if entry["name"] not in KINDS]
    assert {entry["name"] for entry in listed} == {"pods/binding", "pods/log", "pods/status", "nodes/status",
                                                   "bindings"}
    for entry in listed:
        resource, _, sub = entry["name"].partition("/")
        scope = "/api/v1/namespaces/{namespace}/" if entry["namespaced"] else "/api/v1/"
        path = f"{scope}{resource}/{{name}}/{sub}" if sub else scope + resource
        assert {method for at, method in served if at == path} == {methods[v] for v in entry["verbs"]}
    under_objects = {"/".join(path.split("/")[-3::2]) for path, _ in served if "/{name}/" in path}
    assert under_objects == {entry["name"] for entry in listed if "/" in entry["name"]}


def test_every_patch_operation_offers_field_validation_where_kubectl_looks_for_it() -> None:
    """kubectl takes the first PATCH with the object's GVK (in map order) and reads that operation's
    own parameters: every one must list fieldValidation, or kubectl falls back to /openapi/v2."""
    patches = [op for _, method, op in operations(api_v1()) if method == "patch"]
    assert {op["x-kubernetes-group-version-kind"]["kind"] for op in patches} == set(KINDS.values())
    for op in patches:
        assert {"fieldValidation", "fieldManager"} <= {p["name"] for p in op["parameters"]}
        assert set(op["requestBody"]["content"]) == {"application/json-patch+json",
                                                     "application/merge-patch+json"}


def test_writes_offer_field_validation_and_every_write_offers_dry_run() -> None:
    for _, method, op in operations(api_v1()):
        names = {p["name"] for p in op.get("parameters", [])}
        assert ("fieldValidation" in names) == (method in ("put", "post", "patch"))
        assert ("dryRun" in names) == (method in ("put", "post", "patch", "delete"))


# -- schemas ------------------------------------------------------------------------------------


def refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref":
                yield item
            else:
                yield from refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from refs(item)


def test_every_reference_resolves_to_a_component() -> None:
    doc = api_v1()
    schemas = doc["components"]["schemas"]
    assert {ref.removeprefix("#/components/schemas/") for ref in refs(doc)} <= set(schemas)


def test_each_kind_and_its_list_has_a_component_with_its_gvk() -> None:
    schemas = api_v1()["components"]["schemas"]
    for kind in [*KINDS.values(), "Binding"]:
        for name in (kind, kind + "List") if kind != "Binding" else (kind,):
            gvk = schemas[corev1.CORE + name]["x-kubernetes-group-version-kind"]
            assert gvk == [{"group": "", "kind": name, "version": "v1"}]


def test_a_newly_served_kind_gets_its_paths_and_a_generic_open_schema() -> None:
    doc = api_v1(build({**KINDS, "widgets": "Widget"}, NAMESPACED | {"widgets"}))
    assert {"/api/v1/widgets", "/api/v1/namespaces/{namespace}/widgets",
            "/api/v1/namespaces/{namespace}/widgets/{name}"} <= set(doc["paths"])
    widget = doc["components"]["schemas"][corev1.CORE + "Widget"]
    assert widget["x-kubernetes-preserve-unknown-fields"] is True
    assert widget["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]


def test_gpu_resources_are_documented_where_kubectl_explain_shows_them() -> None:
    schemas = api_v1()["components"]["schemas"]
    limits = schemas[corev1.CORE + "ResourceRequirements"]["properties"]["limits"]
    assert limits["additionalProperties"] == {"$ref": "#/components/schemas/" + "io.k8s.apimachinery.pkg.api"
                                              ".resource.Quantity"}
    for name in ("nvidia.com/gpu:", "nvidia.com/gpumem:", "nvidia.com/gpumem-percentage:",
                 "nvidia.com/gpucores:", "nvidia.com/priority:"):
        assert name in limits["description"]
    quota = schemas[corev1.CORE + "ResourceQuotaSpec"]["properties"]["hard"]["description"]
    assert "limits.nvidia.com/gpumem" in quota and "limits.nvidia.com/gpucores" in quota


# -- the table against the real schema ----------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    return json.loads(REAL_DEFS.read_text())["$defs"]  # type: ignore[no-any-return]


def real_type(prop: dict[str, Any]) -> str:
    """A real property's type in the table's notation (as ``kubectl explain`` prints it)."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[1]
        return {"io.k8s.apimachinery.pkg.api.resource.Quantity": "Quantity"}.get(name, name.rsplit(".", 1)[1])
    types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    type_ = next(t for t in types if t != "null")
    if type_ == "array":
        return "[]" + real_type(prop["items"])
    if type_ == "object":
        return "map[string]" + real_type(prop["additionalProperties"])
    return prop.get("format", "int64") if type_ == "integer" else type_


@pytest.mark.parametrize("short", sorted(corev1.TYPES))
def test_a_described_type_has_exactly_the_real_v1_33_fields(short: str, real: dict[str, Any]) -> None:
    described = corev1.TYPES[short]
    actual = real[described.name]
    assert set(described.fields) == set(actual["properties"])
    assert set(described.required) == set(actual.get("required", []))
    for name, field in described.fields.items():
        assert field.type == real_type(actual["properties"][name]), name


@pytest.mark.parametrize("short", sorted(corev1.TYPES))
def test_a_described_types_patch_tags_are_the_real_ones(short: str, real: dict[str, Any]) -> None:
    """What strategic merge patches merge by key (``corev1.PATCH_TAGS``), against the real schema."""
    described = corev1.TYPES[short]
    for name, prop in real[described.name]["properties"].items():
        field = described.fields[name]
        assert (field.patch_strategy, field.merge_key) == (
            prop.get("x-kubernetes-patch-strategy", ""), prop.get("x-kubernetes-patch-merge-key", "")), name


def test_the_document_carries_the_patch_tags_as_the_real_one_does() -> None:
    schemas = orjson.loads(build().groups["api/v1"].body)["components"]["schemas"]
    env = schemas["io.k8s.api.core.v1.Container"]["properties"]["env"]
    assert (env["x-kubernetes-patch-strategy"], env["x-kubernetes-patch-merge-key"]) == ("merge", "name")
    tolerations = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["tolerations"]
    assert "x-kubernetes-patch-strategy" not in tolerations  # atomic: replaced whole


def test_every_opaque_type_is_a_real_one_and_every_field_type_is_known(real: dict[str, Any]) -> None:
    assert {name for name, _ in corev1.OPAQUE.values()} <= set(real)
    for described in corev1.TYPES.values():
        for field in described.fields.values():
            inner = corev1.element(field.type)[1]
            assert inner in corev1.SCALARS or inner in corev1.TYPES or inner in corev1.OPAQUE, field


# -- hash ---------------------------------------------------------------------------------------


def test_the_hash_is_the_sha512_of_the_document_and_names_it_in_the_root() -> None:
    docs = build()
    group = docs.groups["api/v1"]
    assert group.etag == hashlib.sha512(group.body).hexdigest().upper()
    assert orjson.loads(docs.root.body) == {
        "paths": {"api/v1": {"serverRelativeURL": f"/openapi/v3/api/v1?hash={group.etag}"}}}
    assert docs.root.etag == hashlib.sha512(docs.root.body).hexdigest().upper()


def test_the_same_resources_give_the_same_bytes_and_others_another_hash() -> None:
    assert build().groups["api/v1"].body == build().groups["api/v1"].body
    other = build({**KINDS, "widgets": "Widget"})
    assert other.groups["api/v1"].etag != build().groups["api/v1"].etag
    assert other.root.etag != build().root.etag


# -- v2 -----------------------------------------------------------------------------------------


def test_v2_is_an_empty_document_as_json_and_as_protobuf() -> None:
    docs = build()
    assert orjson.loads(docs.v2_json.body) == {"swagger": "2.0", "info": {"title": "Kubernetes",
                                               "version": "unversioned"}, "paths": {}, "definitions": {}}
    # openapi.v2.Document: field 1 swagger "2.0", field 2 Info{1 title, 2 version}
    assert docs.v2_protobuf.body == b"\n\x032.0\x12\x19\n\nKubernetes\x12\x0bunversioned"


# -- serving helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(("accept", "ok"), [
    ("", True), ("application/json", True), ("application/json, */*", True), ("*/*", True),
    ("application/*;q=0.9", True), ("application/com.github.proto-openapi.spec.v3.v1.0+protobuf", False),
    ("text/html", False),
])
def test_json_is_served_unless_the_client_refuses_it(accept: str, ok: bool) -> None:
    assert openapi.accepts_json(accept) is ok


@pytest.mark.parametrize(("accept", "served"), [
    ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf", "protobuf"),
    ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf, application/json", "protobuf"),
    ("application/json, application/com.github.proto-openapi.spec.v2.v1.0+protobuf", "json"),
    ("", "json"), ("*/*", "json"), ("text/html", None),
])
def test_v2_is_served_in_the_first_format_the_client_names(accept: str, served: str | None) -> None:
    assert openapi.v2_format(accept) == served


@pytest.mark.parametrize(("header", "match"), [
    ('"ABC"', True), ('W/"ABC"', True), ('"X", "ABC"', True), ("*", True), ('"X"', False), ("", False),
    ("ABC", False),
])
def test_if_none_match_compares_quoted_etags_weakly(header: str, match: bool) -> None:
    assert openapi.etag_matches(header, "ABC") is match
