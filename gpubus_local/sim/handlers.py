"""The REST verbs of the simulated API server for pods, nodes, namespaces, resourcequotas and events.

Each handler decodes the request, checks what it would store (``shapes``, once per write: reads
trust the store), calls the store and the pure object rules, and renders JSON; errors are
``ApiError`` and become a ``Status`` in the server's middleware. Watches stream
newline-delimited events from a store ``Watcher`` with bookmarks and the server-side timeout; the
events that arrive within ``WatchSettings.coalesce_s`` of the first go out in one chunk.
Strategic-merge patches merge lists by their merge key and honour the directives (``strategic``); an
update of a pod's spec is held to the real server's rules (``pod_update``). A write's options
(``dryRun``, ``fieldValidation``) are read once, by ``write_options``; with ``dryRun=All`` it runs all
of that and the store answers what it would have stored (``dryrun``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from gpubus_local.sim import field_validation, objects, pod_update, shapes, write_options
from gpubus_local.sim.admission import AdmissionChain
from gpubus_local.sim.errors import ApiError, PatchError
from gpubus_local.sim.field_validation import Directive
from gpubus_local.sim.jsonpatch import apply_json_patch, merge_patch
from gpubus_local.sim.kinds import KINDS, NAMESPACED
from gpubus_local.sim.store import Obj, Store, event_line
from gpubus_local.sim.strategic import strategic_merge_patch
from gpubus_local.sim.tables import as_table, include_object, wants_table

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Verb = Callable[[web.Request, str], Awaitable[web.StreamResponse]]

_SUCCESS_201 = orjson.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "code": 201})
_STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_MERGE_TYPES = frozenset({"application/merge-patch+json", _STRATEGIC_MERGE_PATCH})
_JSON_PATCH = "application/json-patch+json"
_TIMEOUT_SECONDS = re.compile(r"[0-9]{1,18}")  # an int64 of seconds, never negative
_IMMUTABLE_META = ("name", "namespace", "uid", "creationTimestamp")
_GENERATE_NAME_TRIES = 7


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _warn(response: web.Response, warnings: tuple[str, ...]) -> web.Response:
    """One ``Warning`` header per warning, as the real server sends them (kubectl prints each)."""
    for warning in warnings:
        response.headers.add("Warning", warning)
    return response


#: What typed clients such as ``kubectl create namespace|quota`` send: Kubernetes protobuf.
_PROTOBUF = "application/vnd.kubernetes.protobuf"


async def read_json(request: web.Request) -> Any:
    """The body, refused (400) unless the server can also write it back out once stored."""
    if request.content_type == _PROTOBUF:
        # a real server decodes it; the stand-in speaks JSON only, so say so instead of "not JSON"
        raise ApiError(415, "UnsupportedMediaType",
                       f"the body of the request was in an unknown format - accepted media types include: "
                       f"application/json (got {_PROTOBUF}: this API server stand-in speaks JSON only; "
                       f"write the object as YAML and `kubectl apply -f` it, e.g. `kubectl create namespace "
                       f"team-a --dry-run=client -o yaml | kubectl apply -f -`)")
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ApiError.bad_request(f"the request body is not valid JSON: {e}") from e
    shapes.check_depth(body)
    return body


def read_object(body: Any, kind: str) -> Obj:
    if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
        raise ApiError.bad_request(f"expected a {kind} object")
    if body.get("kind") not in (None, "", kind):
        raise ApiError.bad_request(f"expected kind {kind}, got {body.get('kind')!r}")
    body.setdefault("metadata", {})
    return body


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchSettings:
    bookmark_interval_s: float = 5.0
    """How often an idle watch that allowed bookmarks gets a BOOKMARK (a real server: ~1 min)."""
    default_timeout_s: float = 1800.0
    max_timeout_s: float = 3600.0
    coalesce_s: float = 0.005
    """After an event wakes a watch, how long it waits for more before writing them in one chunk:
    fewer writes and reader wake-ups under load, at most this much added delivery latency."""
    gone_as_http: bool = False
    """410 for a too-old rv as an HTTP status (True) or as a 200 stream with an ERROR event (False)."""


class ResourceHandlers:
    """The verbs, parameterised by resource; ``route(verb, resource)`` makes an aiohttp handler."""

    def __init__(self, store: Store, admission: AdmissionChain, watch: WatchSettings) -> None:
        self.store, self.admission, self.watch_settings = store, admission, watch
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()
        self.store.close_all_watches()

    def resume(self) -> None:
        self._stopping.clear()

    def route(self, verb: Verb, resource: str) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await verb(request, resource)

        return handler

    @staticmethod
    def _ns(request: web.Request, resource: str) -> str:
        return request.match_info.get("ns", "") if resource in NAMESPACED else ""

    # collection verbs -----------------------------------------------------------

    async def list_or_watch(self, request: web.Request, resource: str) -> web.StreamResponse:
        q = request.query
        namespace = request.match_info.get("ns")
        if q.get("watch") in ("1", "true", "True"):
            return await self._watch(request, resource, namespace)
        items, rv = self.store.list(resource, namespace, q.get("fieldSelector"), q.get("labelSelector"))
        if resource == "resourcequotas":
            items = [self._quota_with_status(quota) for quota in items]
        if wants_table(request.headers.get("Accept", "")):
            return json_response(as_table(resource, items, rv, include_object(q.get("includeObject"))))
        return json_response({"kind": f"{KINDS[resource]}List", "apiVersion": "v1",
                              "metadata": {"resourceVersion": rv}, "items": items})

    async def create(self, request: web.Request, resource: str) -> web.StreamResponse:
        namespace, kind = self._ns(request, resource), KINDS[resource]
        options = write_options.for_write(request.query, "CreateOptions")
        body = read_object(await read_json(request), kind)
        decoded = field_validation.decoded(kind, body, options.validation)
        obj = decoded.obj
        shapes.check_metadata(kind, obj["metadata"])
        _place(obj["metadata"], resource, namespace)
        generated = not obj["metadata"].get("name")
        if resource == "pods":
            obj = await self._admit_pod(obj, namespace, options.dry_run)
        else:
            if resource in NAMESPACED:
                self._namespace(namespace)
            shapes.check_write(resource, kind, obj, None)
            obj = objects.finish_create(resource, obj, kind)
            if resource == "namespaces":
                obj = _namespace_defaults(obj)
        if generated:
            self._avoid_name_collision(resource, obj)
        created = self.store.create(resource, obj, dry_run=options.dry_run)
        return _warn(json_response(created, status=201), decoded.warnings)

    def _avoid_name_collision(self, resource: str, obj: Obj) -> None:
        """A generated name that is taken is generated again, up to 7 tries in all, as the API server
        has done since RetryGenerateName (1.32); after that the create is a 409 AlreadyExists."""
        meta = obj["metadata"]
        for _ in range(_GENERATE_NAME_TRIES - 1):
            if self.store.find(resource, meta.get("namespace", ""), meta["name"]) is None:
                return
            meta["name"] = objects.generate_name(meta["generateName"])

    async def _admit_pod(self, pod: Obj, namespace: str, dry_run: bool) -> Obj:
        ns_obj = self._namespace(namespace)
        pod = objects.default_pod(pod, namespace)
        ns_labels = ns_obj["metadata"].get("labels") or {}
        shapes.check_write("pods", "Pod", pod, None)  # the decoder's 400 comes before any webhook
        pod_update.check_spec_types(pod.get("spec"))
        admitted = await self.admission.admit(pod, namespace, ns_labels, dry_run=dry_run)
        if admitted is not pod:
            pod = _webhooks_pod(admitted)
        pod["metadata"]["namespace"] = namespace
        pod = objects.new_pod_status(objects.finish_create("pods", pod, "Pod"))
        quotas = list(self.store.items("resourcequotas", namespace))
        if quotas:
            objects.check_quotas(pod, quotas, list(self.store.items("pods", namespace)))
        return pod

    def _namespace(self, namespace: str) -> Obj:
        found = self.store.find("namespaces", "", namespace)
        if found is None:
            raise ApiError.not_found("namespaces", namespace)
        return found

    # item verbs ---------------------------------------------------------------------

    async def get(self, request: web.Request, resource: str) -> web.StreamResponse:
        obj = self.store.get(resource, self._ns(request, resource), request.match_info["name"])
        if resource == "resourcequotas":
            obj = self._quota_with_status(obj)
        if wants_table(request.headers.get("Accept", "")):
            return json_response(as_table(resource, [obj], obj["metadata"]["resourceVersion"],
                                          include_object(request.query.get("includeObject"))))
        return json_response(obj)

    async def replace(self, request: web.Request, resource: str) -> web.StreamResponse:
        return await self._write(request, resource, status_only=False, patch=False)

    async def replace_status(self, request: web.Request, resource: str) -> web.StreamResponse:
        return await self._write(request, resource, status_only=True, patch=False)

    async def patch(self, request: web.Request, resource: str) -> web.StreamResponse:
        return await self._write(request, resource, status_only=False, patch=True)

    async def patch_status(self, request: web.Request, resource: str) -> web.StreamResponse:
        return await self._write(request, resource, status_only=True, patch=True)

    async def _write(
        self, request: web.Request, resource: str, *, status_only: bool, patch: bool
    ) -> web.Response:
        namespace, name = self._ns(request, resource), request.match_info["name"]
        if patch:
            _check_patch_type(request.content_type)
        options = write_options.for_write(request.query, "PatchOptions" if patch else "UpdateOptions")
        body = await read_json(request)
        old = self.store.get(resource, namespace, name)
        if patch:
            new, expect_rv = _apply_patch(request.content_type, old, body)
        else:
            new = read_object(body, KINDS[resource])
            _check_url_identity(new["metadata"], resource, namespace, name)
            expect_rv = new["metadata"].get("resourceVersion")
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise ApiError.invalid(resource, name, "the patched object has no metadata")
        decoded = field_validation.decoded(KINDS[resource], new, options.validation,
                                           patch=body if patch else None,
                                           strategic=request.content_type == _STRATEGIC_MERGE_PATCH)
        new = _keep_identity(decoded.obj, old)
        if resource in ("pods", "nodes"):
            new = objects.only_status(new, old) if status_only else objects.keep_status(new, old)
        shapes.check_write(resource, KINDS[resource], new, old)
        if resource == "pods" and not status_only:
            new = pod_update.checked_update(new, old)
        stored = self.store.update(resource, new, expect_rv=expect_rv, dry_run=options.dry_run)
        return _warn(json_response(stored), decoded.warnings)

    async def delete(self, request: web.Request, resource: str) -> web.StreamResponse:
        namespace, name = self._ns(request, resource), request.match_info["name"]
        body = await _optional_json(request)
        options = write_options.for_delete(body, request.query)
        # No await from here to the delete: the preconditions hold for the object it removes.
        old = self.store.get(resource, namespace, name)
        _check_preconditions(resource, options.preconditions, old)
        if resource == "namespaces" and not options.dry_run:
            for inner in (r for r in KINDS if r in NAMESPACED):  # KINDS' order: pods first
                for obj in list(self.store.items(inner, name)):
                    self.store.delete(inner, name, obj["metadata"]["name"])
        return json_response(self.store.delete(resource, namespace, name, dry_run=options.dry_run))

    async def delete_collection(self, request: web.Request, resource: str) -> web.StreamResponse:
        q = request.query
        options = write_options.for_delete(await _optional_json(request), q)
        items, _ = self.store.list(resource, request.match_info.get("ns"), q.get("fieldSelector"),
                                   q.get("labelSelector"))
        deleted = [self.store.delete(resource, o["metadata"].get("namespace", ""), o["metadata"]["name"],
                                     dry_run=options.dry_run) for o in items]
        return json_response({"kind": f"{KINDS[resource]}List", "apiVersion": "v1",
                              "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})

    async def bind(self, request: web.Request, resource: str) -> web.StreamResponse:
        options = write_options.for_write(request.query, "CreateOptions")
        binding = shapes.check_binding(await read_json(request))
        warnings = field_validation.decoded("Binding", binding, options.validation).warnings
        namespace = request.match_info["ns"]
        meta = binding.get("metadata") or {}
        name = meta.get("name") or ""
        if request.match_info.get("name", name) != name:
            raise ApiError.bad_request("name in URL does not match name in Binding object")
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise ApiError.bad_request("the namespace of the provided object does not match the namespace "
                                       "sent on the request")
        pod = self.store.get("pods", namespace, name)
        self.store.update("pods", objects.bind(pod, binding), dry_run=options.dry_run)
        return _warn(web.Response(body=_SUCCESS_201, status=201, content_type="application/json"), warnings)

    def _quota_with_status(self, quota: Obj) -> Obj:
        pods = list(self.store.items("pods", quota["metadata"]["namespace"]))
        return objects.with_quota_status(quota, pods)

    # watch ----------------------------------------------------------------------------

    async def _watch(self, request: web.Request, resource: str, namespace: str | None) -> web.StreamResponse:
        q, settings = request.query, self.watch_settings
        timeout = _watch_timeout_s(q.get("timeoutSeconds"), settings)
        try:
            watcher = self.store.watch(resource, namespace, q.get("fieldSelector"), q.get("labelSelector"),
                                       q.get("resourceVersion"))
        except ApiError as e:
            if e.code != 410 or settings.gone_as_http:
                raise
            return await _stream_error(request, e)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while not watcher.closed and not self._stopping.is_set():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                wait = min(remaining, settings.bookmark_interval_s) if bookmarks else remaining
                try:
                    async with asyncio.timeout(wait):
                        await watcher.ready.wait()
                except TimeoutError:
                    if bookmarks:
                        watcher.push(_bookmark(resource, self.store.rv), self.store.rv)
                else:
                    await _coalesce(settings.coalesce_s, watcher.closed)
                batch = watcher.drain()
                if batch:
                    await response.write(b"".join(batch))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        except Exception as e:  # headers are sent: end the stream as a real server does, with an ERROR
            log.exception("watch of %s failed", resource)
            await _write_quietly(response, event_line("ERROR", ApiError.internal(type(e).__name__).status()))
        finally:
            self.store.unwatch(watcher)
        return response


def _webhooks_pod(admitted: Obj) -> Obj:
    """The pod the webhooks' JSON patches made, decoded as the real server decodes it: checked as
    input (it can nest deeper than the body) and leniently (unknown fields dropped). The pod before
    them was decoded already, so the unknown fields found are exactly those the patches wrote."""
    pod = read_object(admitted, "Pod")
    shapes.check_depth(pod)
    shapes.check_write("pods", "Pod", pod, None)
    pod_update.check_spec_types(pod.get("spec"))
    decoded: Obj = field_validation.decoded("Pod", pod, Directive.IGNORE).obj
    return decoded


def _watch_timeout_s(text: str | None, settings: WatchSettings) -> float:
    """``timeoutSeconds``: a non-negative integer (0 or absent: the default), at most the maximum.
    Anything else is a 400 before the watch starts: a NaN deadline would break the loop's timers."""
    if not text:
        return settings.default_timeout_s
    if not _TIMEOUT_SECONDS.fullmatch(text):
        raise ApiError.bad_request(f'invalid value for timeoutSeconds: "{text}": must be a non-negative '
                                   "integer")
    return min(int(text) or settings.default_timeout_s, settings.max_timeout_s)


async def _write_quietly(response: web.StreamResponse, line: bytes) -> None:
    with contextlib.suppress(ConnectionResetError):
        await response.write(line)


async def _coalesce(window_s: float, closed: bool) -> None:
    """Let the events of the next ``window_s`` join this batch: one socket write (and one wake-up
    of the reading process) for several events, instead of one per event, at busy times."""
    if window_s > 0 and not closed:
        await asyncio.sleep(window_s)


def _bookmark(resource: str, rv: int) -> bytes:
    return event_line("BOOKMARK", {"kind": KINDS[resource], "apiVersion": "v1",
                                   "metadata": {"resourceVersion": str(rv)}})


async def _stream_error(request: web.Request, error: ApiError) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(event_line("ERROR", error.status()))
    await response.write_eof()
    return response


def _check_patch_type(content_type: str) -> None:
    """415 before the body is read: an unknown format says nothing about whether it is JSON."""
    if content_type not in _MERGE_TYPES and content_type != _JSON_PATCH:
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                       "accepted media types include: application/json-patch+json, "
                       "application/merge-patch+json, application/strategic-merge-patch+json "
                       f"(got {content_type})")


def _apply_patch(content_type: str, old: Obj, body: Any) -> tuple[Any, str | None]:
    """The patched object and the resourceVersion the patch insists on (None: unconditional)."""
    try:
        if content_type == _JSON_PATCH:
            patched = apply_json_patch(old, body)
            shapes.check_depth(patched)  # an "add" at a deep path can nest deeper than its value
            return patched, None
        if not isinstance(body, dict):
            raise ApiError.bad_request("a merge patch must be a JSON object")
        meta = body.get("metadata")
        expect_rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if content_type == _STRATEGIC_MERGE_PATCH:
            return strategic_merge_patch(old, body), expect_rv
        return merge_patch(old, body), expect_rv
    except PatchError as e:
        if content_type == _STRATEGIC_MERGE_PATCH:  # the real server's 400 for a malformed directive
            raise ApiError.bad_request(str(e)) from e
        raise ApiError(422, "Invalid", f"the patch could not be applied: {e}") from e


def _place(meta: Obj, resource: str, namespace: str) -> None:
    """A namespaced object lives in the URL's namespace (a different one in the body is a 400); a
    cluster-scoped one in none, whatever the body says (``BeforeCreate`` clears it)."""
    if resource not in NAMESPACED:
        meta.pop("namespace", None)
        return
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise ApiError.bad_request("the namespace of the provided object does not match the namespace "
                                   "sent on the request")
    meta["namespace"] = namespace


def _check_url_identity(meta: Obj, resource: str, namespace: str, name: str) -> None:
    """A PUT body names the object of its URL (the real server's ``checkName``); never a rename."""
    if meta.get("name") != name:
        raise ApiError.bad_request(f"the name of the object ({meta.get('name') or ''}) does not match the "
                                   f"name on the URL ({name})")
    if resource in NAMESPACED and meta.get("namespace") and meta["namespace"] != namespace:
        raise ApiError.bad_request(f"the namespace of the object ({meta['namespace']}) does not match the "
                                   f"namespace on the URL ({namespace})")


def _keep_identity(new: Obj, old: Obj) -> Obj:
    """Identity comes from the stored object; a cluster-scoped one never gains a namespace."""
    old_meta = old["metadata"]
    meta = {**new["metadata"], **{k: old_meta[k] for k in _IMMUTABLE_META if k in old_meta}}
    if "namespace" not in old_meta:
        meta.pop("namespace", None)
    return {**new, "metadata": meta, "apiVersion": old.get("apiVersion", "v1"), "kind": old.get("kind")}


async def _optional_json(request: web.Request) -> Any:
    return await read_json(request) if request.can_read_body else None


def _check_preconditions(resource: str, pre: write_options.Preconditions, old: Obj) -> None:
    """DeleteOptions' ``preconditions`` against the object being deleted: a mismatch is a 409."""
    meta, name = old["metadata"], old["metadata"]["name"]
    if pre.uid and pre.uid != meta.get("uid"):
        raise ApiError.conflict(resource, name, f"Precondition failed: UID in precondition: {pre.uid}, "
                                f"UID in object meta: {meta.get('uid')}")
    if pre.resource_version and pre.resource_version != meta["resourceVersion"]:
        raise ApiError.conflict(resource, name, f"Precondition failed: ResourceVersion in precondition: "
                                f"{pre.resource_version}, ResourceVersion in object meta: "
                                f"{meta['resourceVersion']}")


def _namespace_defaults(ns: Obj) -> Obj:
    name = ns["metadata"]["name"]
    labels = {**(ns["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": name}
    return {**ns, "metadata": {**ns["metadata"], "labels": labels}, "status": {"phase": "Active"}}
