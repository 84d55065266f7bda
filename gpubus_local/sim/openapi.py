"""The OpenAPI documents of the simulated API server: the v3 root (``/openapi/v3``) and ``api/v1``
group-version document, built once from the resources it serves and the ``corev1`` table, and an
empty v2 document (``/openapi/v2``).

What kubectl reads in them: for ``--validate`` (on by default, Strict), the PATCH operation whose
``x-kubernetes-group-version-kind`` is the object's and whether that operation's own ``parameters``
name ``fieldValidation`` — then it leaves validation to the server and sends
``fieldValidation=Strict`` (without a document it stops: "failed to download openapi"); for
``kubectl explain``, the path of the resource, its GVK, and the component schema with that GVK, down
its properties. Paths and operations follow the served kinds (``KINDS``, ``NAMESPACED``) and the
``subresources`` table the routes are made from, so a new kind gets its paths and at least a generic
schema.

Parameters are those the stand-in honours, ``dryRun`` on every write as on a real server (create,
update, patch, delete, deletecollection, the status and binding subresources); no ``limit``/``continue``
or ``pretty``. PATCH bodies are offered as JSON and merge patches only: offered strategic-merge
patches, kubectl would compute them from these schemas, which stop at the opaque types, rather than
from its own compiled-in core/v1 types. A document's hash is the real server's, the upper-case hex
SHA-512 of its bytes: it is in the root's ``serverRelativeURL`` and the ETag, and kubectl caches the
document under it.

kubectl 1.27+ reads v2 (as protobuf) only where v3 cannot answer: to validate a ``kind: List`` file,
which it checks on the client against v2 schemas alone (without a v2 document: "error validating
data"), and as a fallback when v3 is missing. The v2 document here is valid and has no schemas,
so kubectl checks nothing on the client and sends every item of the List with
``fieldValidation=Strict``: the server validates them as it does single objects. Pure; no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gpubus_local.sim import corev1
from gpubus_local.sim.subresources import SUBRESOURCES, Subresource

GROUP_VERSION = "api/v1"
ROOT_PATH = "/openapi/v3"
V2_PATH = "/openapi/v2"
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_V2_PROTOBUF_ACCEPTED = frozenset({V2_PROTOBUF, "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
_JSON_ACCEPTED = frozenset({"*/*", "application/*", "application/json"})
_INFO = {"title": "Kubernetes", "version": "unversioned"}
GROUP_ROUTE = ROOT_PATH + "/{group:.+}"
_GVK = "x-kubernetes-group-version-kind"
_PATCH_STRATEGY, _PATCH_MERGE_KEY = "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key"
_REF = "#/components/schemas/"
_STRING = {"type": "string", "uniqueItems": True}
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")
_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_META_SCHEMAS: dict[str, dict[str, Any]] = {
    corev1.NAMED_SCALARS["Quantity"]: {
        "description": "Quantity is a fixed-point representation of a number: 1, 500m, 3000, 10Gi. GPU "
                       "memory (nvidia.com/gpumem) is in MiB.",
        "oneOf": [{"type": "string"}, {"type": "number"}]},
    corev1.NAMED_SCALARS["Time"]: {
        "description": "Time is a wrapper around time.Time, written as RFC 3339.",
        "type": "string", "format": "date-time"},
    corev1.NAMED_SCALARS["MicroTime"]: {
        "description": "MicroTime is version of Time with microsecond level precision.",
        "type": "string", "format": "date-time"},
    corev1.META + "ListMeta": {
        "description": "ListMeta describes metadata that synthetic resources must have, including lists and "
                       "various status objects.",
        "type": "object", "properties": {
            "continue": {"type": "string"}, "remainingItemCount": dict(corev1.PLAIN_SCALARS["int64"]),
            "resourceVersion": {"type": "string"}, "selfLink": {"type": "string"}}},
    corev1.META + "Status": {
        "description": "Status is a return value for calls that don't return other objects.",
        "type": "object", "properties": {
            "apiVersion": {"type": "string"}, "code": dict(corev1.PLAIN_SCALARS["int32"]), "details": _OPEN,
            "kind": {"type": "string"}, "message": {"type": "string"},
            "metadata": {"$ref": _REF + corev1.META + "ListMeta"},
            "reason": {"type": "string"}, "status": {"type": "string"}},
        _GVK: [{"group": "", "kind": "Status", "version": "v1"}]},
    corev1.META + "DeleteOptions": {
        "description": "DeleteOptions may be provided when deleting an API object; the simulated server "
                       "reads its preconditions (uid, resourceVersion) and dryRun.",
        **_OPEN, _GVK: [{"group": "", "kind": "DeleteOptions", "version": "v1"}]},
    corev1.META + "Patch": {
        "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request "
                       "body.",
        "type": "object"},
}
_FIELD_VALIDATION = (
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) "
    "containing unknown fields. Valid values are: - Ignore: unknown fields are silently dropped from the "
    "object. - Warn: a warning is sent in the standard Warning response header for each unknown field "
    "dropped from the object; the request still succeeds. This is the default. - Strict: the request fails "
    "with a BadRequest error if any unknown fields would be dropped from the object.")
_DRY_RUN = ("When present, indicates that modifications should not be persisted. An invalid or unrecognized "
            "dryRun directive will result in an error response and no further processing of the request. "
            "Valid values are: - All: all dry run stages will be processed")
_FIELD_MANAGER = ("fieldManager is a name associated with the actor or entity that is making these changes "
                  "(accepted; the simulated server keeps no managedFields).")
_LIST_PARAMS = (
    ("allowWatchBookmarks", "boolean", "allowWatchBookmarks requests watch events with type \"BOOKMARK\"."),
    ("fieldSelector", "string", "A selector to restrict the list of returned objects by their fields."),
    ("labelSelector", "string", "A selector to restrict the list of returned objects by their labels."),
    ("resourceVersion", "string", "resourceVersion sets a constraint on what resource versions a request may "
     "be served from; for a watch, the version to start after."),
    ("timeoutSeconds", "integer", "Timeout for the list/watch call."),
    ("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, "
     "update, and remove notifications."),
)
_LOG_PARAMS = (
    ("container", "string", "The container for which to stream logs. Defaults to only container if there "
     "is one container in the pod."),
    ("follow", "boolean", "Follow the log stream of the pod. Defaults to false."),
    ("limitBytes", "integer", "If set, the number of bytes to read from the server before terminating the "
     "log output."),
    ("previous", "boolean", "Return previous terminated container logs. Defaults to false."),
    ("sinceSeconds", "integer", "A relative time in seconds before the current time from which to show logs. "
     "Only one of sinceSeconds or sinceTime may be specified."),
    ("tailLines", "integer", "If set, the number of lines from the end of the logs to show."),
    ("timestamps", "boolean", "If true, add an RFC3339 timestamp at the beginning of every line of log "
     "output. Defaults to false."),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Document:
    body: bytes
    etag: str
    """Upper-case hex SHA-512 of ``body``, unquoted (the ``hash`` of its URL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenApi:
    root: Document
    """The v3 root: where each group-version's document is, under its hash."""
    groups: Mapping[str, Document]
    """``api/v1`` -> its v3 document."""
    v2_json: Document
    v2_protobuf: Document
    """The same (empty) v2 document as JSON and as gnostic's ``openapi.v2.Document`` protobuf."""


def document(body: bytes) -> Document:
    return Document(body=body, etag=hashlib.sha512(body).hexdigest().upper())


def server_relative_url(group: str, etag: str) -> str:
    return f"{ROOT_PATH}/{group}?hash={etag}"


def build(kinds: Mapping[str, str], namespaced: Collection[str]) -> OpenApi:
    """The documents for resources ``kinds`` (resource -> kind) and their ``SUBRESOURCES``."""
    group = document(orjson.dumps(api_v1(kinds, namespaced), option=orjson.OPT_SORT_KEYS))
    root = {"paths": {GROUP_VERSION: {"serverRelativeURL": server_relative_url(GROUP_VERSION, group.etag)}}}
    v2_json = orjson.dumps({"swagger": "2.0", "info": _INFO, "paths": {}, "definitions": {}})
    # openapi.v2.Document{swagger: 1, info: 2} with Info{title: 1, version: 2}: only length-delimited fields
    v2_protobuf = _protobuf(1, b"2.0") + _protobuf(2, _protobuf(1, _INFO["title"].encode())
                                                   + _protobuf(2, _INFO["version"].encode()))
    return OpenApi(root=document(orjson.dumps(root)), groups={GROUP_VERSION: group},
                   v2_json=document(v2_json), v2_protobuf=document(v2_protobuf))


def _protobuf(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (a string or a message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def api_v1(kinds: Mapping[str, str], namespaced: Collection[str]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for resource, kind in kinds.items():
        paths.update(_resource_paths(resource, kind, resource in namespaced))
    subresources = [sub for sub in SUBRESOURCES if sub.resource in kinds]
    for sub in subresources:
        paths.update(_SUBRESOURCE_PATHS[sub.name](sub, sub.resource in namespaced))
    top_kinds = dict.fromkeys([*kinds.values(), *(sub.kind for sub in subresources)])
    tops = [corev1.kind_type(kind) for kind in top_kinds]
    schemas = dict(_META_SCHEMAS)
    for kind in kinds.values():
        schemas[corev1.CORE + kind + "List"] = _list_schema(kind)
    for name, schema in _reachable(tops):
        schemas[name] = schema
    return {"openapi": "3.0.0", "info": _INFO,
            "paths": paths, "components": {"schemas": schemas}}


# -- paths ------------------------------------------------------------------------------------------


def _scope(resource: str, namespaced: bool) -> tuple[str, str, list[dict[str, Any]]]:
    """A resource's collection path, the word its operation ids take, and its path parameters."""
    if not namespaced:
        return "/api/v1/" + resource, "", []
    return ("/api/v1/namespaces/{namespace}/" + resource, "Namespaced",
            [_path_param("namespace", "object name and auth scope, such as for teams and projects")])


def _resource_paths(resource: str, kind: str, namespaced: bool) -> dict[str, Any]:
    base, where, scope = _scope(resource, namespaced)
    item_params = [_path_param("name", f"name of the {kind}"), *scope]
    ref, writes, lists = _ref(corev1.kind_type(kind).name), _write_params(), _query_params(_LIST_PARAMS)
    paths: dict[str, Any] = {
        base: {"parameters": scope,
               "get": _op("list", f"list or watch objects of kind {kind}", f"listCoreV1{where}{kind}", kind,
                          params=lists, response=_ref(corev1.CORE + kind + "List"), stream=True),
               "post": _op("post", f"create a {kind}", f"createCoreV1{where}{kind}", kind, params=writes,
                           body={"application/json": ref}, response=ref, code="201"),
               "delete": _op("deletecollection", f"delete collection of {kind}",
                             f"deleteCoreV1Collection{where}{kind}", kind,
                             params=[_dry_run_param(),
                                     *_query_params(_LIST_PARAMS, "fieldSelector", "labelSelector")],
                             response=_ref(corev1.CORE + kind + "List"))},
        base + "/{name}": {"parameters": item_params, **_item_ops(kind, where, "", ref),
                           "delete": _op("delete", f"delete a {kind}", f"deleteCoreV1{where}{kind}", kind,
                                         params=[_dry_run_param()],
                                         body={"application/json": _ref(corev1.META + "DeleteOptions")},
                                         response=ref)},
    }
    if namespaced:
        paths[f"/api/v1/{resource}"] = {"get": _op(
            "list", f"list or watch objects of kind {kind}", f"listCoreV1{kind}ForAllNamespaces", kind,
            params=lists, response=_ref(corev1.CORE + kind + "List"), stream=True)}
    return paths


def _status_path(sub: Subresource, namespaced: bool) -> dict[str, Any]:
    base, where, scope = _scope(sub.resource, namespaced)
    ops = _item_ops(sub.kind, where, "Status", _ref(corev1.kind_type(sub.kind).name))
    return {f"{base}/{{name}}/{sub.name}": {"parameters": [_path_param("name", f"name of the {sub.kind}"),
                                                           *scope], **ops}}


def _item_ops(kind: str, where: str, sub: str, ref: dict[str, str]) -> dict[str, Any]:
    of = " status of" if sub else ""
    writes = _write_params()
    patch_body = {t: _ref(corev1.META + "Patch") for t in _PATCH_TYPES}
    return {
        "get": _op("get", f"read{of} the specified {kind}", f"readCoreV1{where}{kind}{sub}", kind,
                   response=ref),
        "put": _op("put", f"replace{of} the specified {kind}", f"replaceCoreV1{where}{kind}{sub}", kind,
                   params=writes, body={"application/json": ref}, response=ref),
        "patch": _op("patch", f"partially update{of} the specified {kind}", f"patchCoreV1{where}{kind}{sub}",
                     kind, params=writes, body=patch_body, response=ref),
    }


def _binding_paths(sub: Subresource, namespaced: bool) -> dict[str, Any]:
    """``pods/{name}/binding`` and the namespace's ``bindings`` collection (pods are namespaced)."""
    base, _, scope = _scope(sub.resource, namespaced)
    ref = _ref(corev1.CORE + sub.kind)

    def create(what: str, op_id: str) -> dict[str, Any]:
        return _op("post", what, op_id, sub.kind, params=_write_params(), body={"application/json": ref},
                   response=ref, code="201")

    return {
        f"/api/v1/namespaces/{{namespace}}/{sub.collection}": {
            "parameters": scope, "post": create("create a Binding", "createCoreV1NamespacedBinding")},
        f"{base}/{{name}}/{sub.name}": {
            "parameters": [_path_param("name", "name of the Binding"), *scope],
            "post": create("create binding of a Pod", "createCoreV1NamespacedPodBinding")},
    }


def _log_path(sub: Subresource, namespaced: bool) -> dict[str, Any]:
    """``pods/{name}/log``: plain text, with the query parameters the stand-in honours."""
    base, _, scope = _scope(sub.resource, namespaced)
    params = [_path_param("name", "name of the Pod"), *scope, *_query_params(_LOG_PARAMS)]
    get = _op("get", "read log of the specified Pod", "readCoreV1NamespacedPodLog", sub.kind,
              response={"type": "string"}, content_type="text/plain")
    return {f"{base}/{{name}}/{sub.name}": {"parameters": params, "get": get}}


#: The paths of each subresource (by name), for its resource (namespaced or not).
_SUBRESOURCE_PATHS: dict[str, Callable[[Subresource, bool], dict[str, Any]]] = {
    "status": _status_path, "binding": _binding_paths, "log": _log_path,
}


def _op(action: str, description: str, op_id: str, kind: str, *, params: list[dict[str, Any]] | None = None,
        body: dict[str, dict[str, str]] | None = None, response: dict[str, str], code: str = "200",
        stream: bool = False, content_type: str = "application/json") -> dict[str, Any]:
    """One operation; its response is ``response`` (a schema) as ``content_type``, and with ``stream``
    also as a watch stream."""
    content = {content_type: {"schema": response}}
    if stream:
        content["application/json;stream=watch"] = {"schema": response}
    op: dict[str, Any] = {
        "description": description, "operationId": op_id, "tags": ["core_v1"],
        "responses": {code: {"description": "Created" if code == "201" else "OK", "content": content}},
        "x-kubernetes-action": action, _GVK: {"group": "", "kind": kind, "version": "v1"}}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": {t: {"schema": s} for t, s in body.items()}}
    return op


def _path_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description, "schema": _STRING}


def _dry_run_param() -> dict[str, Any]:
    return {"name": "dryRun", "in": "query", "description": _DRY_RUN, "schema": _STRING}


def _write_params() -> list[dict[str, Any]]:
    return [_dry_run_param(),
            {"name": "fieldManager", "in": "query", "description": _FIELD_MANAGER, "schema": _STRING},
            {"name": "fieldValidation", "in": "query", "description": _FIELD_VALIDATION, "schema": _STRING}]


def _query_params(table: tuple[tuple[str, str, str], ...], *only: str) -> list[dict[str, Any]]:
    """The query parameters of ``table`` (name, type, description), or of those of it named in ``only``."""
    return [{"name": name, "in": "query", "description": doc, "schema": {"type": type_, "uniqueItems": True}}
            for name, type_, doc in table if not only or name in only]


# -- schemas ----------------------------------------------------------------------------------------


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _list_schema(kind: str) -> dict[str, Any]:
    api = corev1.kind_type(kind).fields
    return {"description": f"{kind}List is a list of {kind} objects.", "type": "object",
            "required": ["items"],
            "properties": {"apiVersion": _property(api["apiVersion"]), "kind": _property(api["kind"]),
                           "items": {"description": f"List of {kind} objects.", "type": "array",
                                     "items": _ref(corev1.kind_type(kind).name)},
                           "metadata": {"allOf": [_ref(corev1.META + "ListMeta")], "default": {},
                                        "description": "Standard list metadata."}},
            _GVK: [{"group": "", "kind": kind + "List", "version": "v1"}]}


def _reachable(tops: list[corev1.TypeDef]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The schemas of ``tops`` and of every described or opaque type their fields name, once each."""
    seen: set[str] = set()
    stack: list[corev1.TypeDef | tuple[str, str]] = list(tops)
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            name, doc = item
            if name not in seen:
                seen.add(name)
                yield name, {"description": doc, **_OPEN}
            continue
        if item.name in seen:
            continue
        seen.add(item.name)
        yield item.name, _type_schema(item)
        for field in item.fields.values():
            inner = corev1.element(field.type)[1]
            if inner in corev1.TYPES:
                stack.append(corev1.TYPES[inner])
            elif inner in corev1.OPAQUE:
                stack.append(corev1.OPAQUE[inner])


def _type_schema(type_: corev1.TypeDef) -> dict[str, Any]:
    schema: dict[str, Any] = {"description": type_.doc, "type": "object",
                              "properties": {name: _property(f) for name, f in type_.fields.items()}}
    if type_.required:
        schema["required"] = list(type_.required)
    if type_.open:
        schema["x-kubernetes-preserve-unknown-fields"] = True
    if type_.kind:
        schema[_GVK] = [{"group": "", "kind": type_.kind, "version": "v1"}]
    return schema


def _property(field: corev1.Field) -> dict[str, Any]:
    container, inner = corev1.element(field.type)
    if container == "list":
        tags = {_PATCH_STRATEGY: field.patch_strategy} if field.patch_strategy else {}
        if field.merge_key:
            tags[_PATCH_MERGE_KEY] = field.merge_key
        return {"description": field.doc, "type": "array", "items": _value(inner), **tags}
    if container == "map":
        return {"description": field.doc, "type": "object", "additionalProperties": _value(inner)}
    return {"description": field.doc, **_value(inner, wrap=True)}


def _value(type_: str, *, wrap: bool = False) -> dict[str, Any]:
    """A field's (or its items') schema: a scalar inline, a named type as a ``$ref`` (in ``allOf``, as the
    real document writes a described field's reference)."""
    if type_ in corev1.PLAIN_SCALARS:
        return dict(corev1.PLAIN_SCALARS[type_])
    if type_ in corev1.NAMED_SCALARS:
        name = corev1.NAMED_SCALARS[type_]
    elif type_ in corev1.TYPES:
        name = corev1.TYPES[type_].name
    else:
        name = corev1.OPAQUE[type_][0]
    return {"allOf": [_ref(name)]} if wrap else _ref(name)


# -- serving ----------------------------------------------------------------------------------------


def _media(accept: str) -> list[str]:
    return [clause.split(";", 1)[0].strip().lower() for clause in accept.split(",")] if accept.strip() else []


def accepts_json(accept: str) -> bool:
    """Whether an ``Accept`` header admits a v3 document as JSON (the protobuf one is not served)."""
    return not _media(accept) or bool(set(_media(accept)) & _JSON_ACCEPTED)


def v2_format(accept: str) -> str | None:
    """``protobuf`` or ``json``: the first the ``Accept`` header names (JSON when it names none); None
    when it admits neither (406)."""
    for media in _media(accept) or ["*/*"]:
        if media in _V2_PROTOBUF_ACCEPTED:
            return "protobuf"
        if media in _JSON_ACCEPTED:
            return "json"
    return None


def etag_matches(if_none_match: str, etag: str) -> bool:
    """``If-None-Match`` against an unquoted ETag, as Go's ``http.ServeContent`` compares them (weakly)."""
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or f'"{etag}"' in tags
