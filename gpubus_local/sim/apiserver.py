"""The Kubernetes API server stand-in: real REST paths over aiohttp, for tests, demos and benchmarks.

Serves what gpubus and its simulated cluster use — pods (with the ``binding`` and ``status``
subresources, and ``log`` from the simulated kubelets' files: ``pod_log_http.py``), nodes (with
``status``; discovery, routes and OpenAPI paths of the subresources all come from the table in
``subresources.py``), namespaces, resourcequotas, events, list/watch with field and
label selectors, resourceVersion conflicts and 410, merge, strategic merge and JSON patches, the
pod update rules (``pod_update.py``), a mutating webhook chain
on pod CREATE — plus enough discovery (``/version``, ``/api``, ``/api/v1``, ``/apis``),
server-side Table printing for ``kubectl get pods,nodes`` with the written kubeconfig, and the
OpenAPI documents (``/openapi/v3``, ``/openapi/v2``; ``openapi.py``) that ``kubectl apply/create``
(server-side field validation) and ``kubectl explain`` read.

Usage::

    async with SimApiServer(webhooks=[WebhookConfig(name=..., url=..., ca_bundle=pem)]) as api:
        path = api.write_kubeconfig(tmp / "kubeconfig")
        kube = await SimKubeClient.from_kubeconfig(path)

Plain HTTP with a dummy bearer token (no authn/authz, no TLS): it is a local harness.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from gpubus_local.sim import openapi
from gpubus_local.sim.admission import AdmissionChain, WebhookConfig
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.handlers import (
    Handler,
    ResourceHandlers,
    Verb,
    WatchSettings,
    json_response,
)
from gpubus_local.sim.kinds import KINDS, NAMESPACED
from gpubus_local.sim.log_files import PodLogFiles
from gpubus_local.sim.objects import finish_create
from gpubus_local.sim.pod_log_http import PodLogHandler
from gpubus_local.sim.store import Store
from gpubus_local.sim.subresources import SUBRESOURCES, SubVerb
from gpubus_local.sim.tokens import ServiceAccountTokens, add_token_routes

log = logging.getLogger(__name__)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SHORT_NAMES = {"pods": ["po"], "nodes": ["no"], "namespaces": ["ns"], "resourcequotas": ["quota"],
                "events": ["ev"]}
#: Resources in the ``all`` category, as on a real server (of those served here: pods).
_CATEGORY_ALL = frozenset({"pods"})
_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_A_YEAR_S = 365 * 24 * 3600


def _discovery_v1() -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for resource, kind in KINDS.items():
        entry = {"name": resource, "singularName": kind.lower(), "namespaced": resource in NAMESPACED,
                 "kind": kind, "verbs": _VERBS, "shortNames": _SHORT_NAMES[resource]}
        if resource in _CATEGORY_ALL:
            entry["categories"] = ["all"]  # what `kubectl get all` lists
        resources.append(entry)
    for sub in SUBRESOURCES:
        namespaced = sub.resource in NAMESPACED
        resources.append({"name": f"{sub.resource}/{sub.name}", "singularName": "", "namespaced": namespaced,
                          "kind": sub.kind, "verbs": list(sub.verbs)})
    for sub in SUBRESOURCES:
        if sub.collection:
            resources.append({"name": sub.collection, "singularName": sub.name, "namespaced": True,
                              "kind": sub.kind, "verbs": list(sub.verbs)})
    return {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources}


#: Status reasons of the HTTP errors aiohttp raises itself (routing, body size, method).
_HTTP_REASONS = {404: "NotFound", 405: "MethodNotAllowed", 413: "RequestEntityTooLarge",
                 415: "UnsupportedMediaType"}


@web.middleware
async def status_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The one place where an error becomes an HTTP status with a ``metav1.Status`` body: clients
    decode every failure as a Status, so even a bug answers one (500 InternalError), logged once."""
    try:
        return await handler(request)
    except ApiError as e:
        return json_response(e.status(), status=e.code)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        reason = _HTTP_REASONS.get(e.status, "BadRequest")
        return json_response(ApiError(e.status, reason, e.reason).status(), status=e.status)
    except Exception as e:
        log.exception("internal error serving %s %s", request.method, request.path)
        error = ApiError.internal(f"{type(e).__name__} serving {request.method} {request.path}")
        return json_response(error.status(), status=500)


class SimApiServer:
    """A running API server stand-in; ``start()``/``stop()`` or ``async with``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        webhooks: list[WebhookConfig] | None = None,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
        history_limit: int = 20_000,
        watch: WatchSettings | None = None,
        log_dir: Path | None = None,
    ) -> None:
        """``log_dir``: the simulated kubelets' pod log directory (``/var/log/pods``), which ``pods/log``
        reads; without one it answers 404."""
        self.host, self.port = host, port
        self.store = Store(history_limit=history_limit)
        self.admission = AdmissionChain(webhooks)
        self.handlers = ResourceHandlers(self.store, self.admission, watch or WatchSettings())
        self.tokens = ServiceAccountTokens(self.store)
        self.pod_logs = PodLogHandler(self.store, PodLogFiles(log_dir) if log_dir is not None else None)
        self._runner: web.AppRunner | None = None
        self.openapi = openapi.build(KINDS, NAMESPACED)
        for name in namespaces:
            self.store.create("namespaces", _namespace(name))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[status_errors], client_max_size=3 * 1024 * 1024)
        add_routes(app.router, self.handlers, self)
        return app

    async def start(self) -> None:
        """Listen (again: a stopped server restarts on the same port with its objects kept)."""
        self.handlers.resume()
        # auto_decompress off: like Go's net/http the API server reads a request body as sent (a
        # gzip body is then not JSON, a 400), where aiohttp's own decoding answered garbage with a 500
        self._runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0, auto_decompress=False
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])
        log.info("simulated API server listening on %s", self.url)

    async def stop(self) -> None:
        self.handlers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.admission.close()

    async def __aenter__(self) -> SimApiServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def add_webhook(self, webhook: WebhookConfig) -> None:
        self.admission.add(webhook)

    def kubeconfig(self, *, context: str = "gpubus-sim") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {"token": "gpubus-sim"}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context,
                                                       "namespace": "default"}}],
            "current-context": context,
        }

    def write_kubeconfig(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        path.chmod(0o600)
        return path


def _namespace(name: str) -> dict[str, Any]:
    ns = finish_create("namespaces", {"metadata": {"name": name}}, "Namespace")
    ns["metadata"]["labels"] = {"kubernetes.io/metadata.name": name}
    ns["status"] = {"phase": "Active"}
    return ns


def add_routes(router: web.UrlDispatcher, h: ResourceHandlers, server: SimApiServer) -> None:
    """Every path the stand-in serves. Literal subresource paths are registered first."""

    async def version(_: web.Request) -> web.Response:
        return json_response({"major": "1", "minor": "33", "gitVersion": "v1.33.0-gpubus-sim",
                              "platform": "linux/amd64"})

    async def api_versions(_: web.Request) -> web.Response:
        return json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{server.host}:{server.port}"}]})

    async def api_groups(_: web.Request) -> web.Response:
        return json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})

    async def api_v1(_: web.Request) -> web.Response:
        return json_response(_discovery_v1())

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def openapi_root(request: web.Request) -> web.Response:
        return await _openapi_reply(request, server.openapi.root)

    async def openapi_group(request: web.Request) -> web.Response:
        return await _openapi_group(request, server.openapi)

    async def openapi_v2(request: web.Request) -> web.Response:
        return await _openapi_v2(request, server.openapi)

    for path, handler in (("/version", version), ("/api", api_versions), ("/apis", api_groups),
                          ("/api/v1", api_v1), ("/healthz", ok), ("/readyz", ok), ("/livez", ok),
                          (openapi.ROOT_PATH, openapi_root), (openapi.GROUP_ROUTE, openapi_group),
                          (openapi.V2_PATH, openapi_v2)):
        router.add_get(path, handler)

    _add_subresource_routes(router, h, server)
    add_token_routes(router, server.tokens)
    for resource in KINDS:
        if resource in NAMESPACED:
            collection = f"/api/v1/namespaces/{{ns}}/{resource}"
            item = collection + "/{name}"
            router.add_get(f"/api/v1/{resource}", h.route(h.list_or_watch, resource))
        else:
            collection, item = f"/api/v1/{resource}", f"/api/v1/{resource}/{{name}}"
        router.add_get(collection, h.route(h.list_or_watch, resource))
        router.add_post(collection, h.route(h.create, resource))
        router.add_delete(collection, h.route(h.delete_collection, resource))
        router.add_get(item, h.route(h.get, resource))
        router.add_put(item, h.route(h.replace, resource))
        router.add_patch(item, h.route(h.patch, resource))
        router.add_delete(item, h.route(h.delete, resource))


def _add_subresource_routes(router: web.UrlDispatcher, h: ResourceHandlers, server: SimApiServer) -> None:
    """The paths of ``SUBRESOURCES``, one per verb, and their collections."""

    async def pod_log(request: web.Request, _: str) -> web.StreamResponse:
        return await server.pod_logs.serve(request)

    # what serves each (subresource, verb) of the table: an entry without one fails here, at start
    served: dict[tuple[str, SubVerb], Verb] = {
        ("binding", "create"): h.bind, ("log", "get"): pod_log,
        ("status", "get"): h.get, ("status", "update"): h.replace_status, ("status", "patch"): h.patch_status}
    add: dict[SubVerb, Callable[[str, Handler], object]] = {
        "create": router.add_post, "get": router.add_get, "update": router.add_put, "patch": router.add_patch}
    for sub in SUBRESOURCES:
        item = (f"/api/v1/namespaces/{{ns}}/{sub.resource}/{{name}}" if sub.resource in NAMESPACED
                else f"/api/v1/{sub.resource}/{{name}}")
        paths = [f"{item}/{sub.name}"]
        if sub.collection:
            paths.append(f"/api/v1/namespaces/{{ns}}/{sub.collection}")
        for verb in sub.verbs:
            for path in paths:
                add[verb](path, h.route(served[sub.name, verb], sub.resource))


async def _openapi_group(request: web.Request, docs: openapi.OpenApi) -> web.Response:
    """A group-version document as the real handler serves it: 404 for an unknown one, 406 unless JSON
    is acceptable, a 301 to the current hash for a stale one, and cacheable for a year under its hash."""
    group = request.match_info["group"]
    doc = docs.groups.get(group)
    if doc is None:
        return web.Response(status=404, text="404 page not found\n")
    if not openapi.accepts_json(request.headers.get("Accept", "")):
        return web.Response(status=406, headers={"Vary": "Accept"})
    wanted, headers = request.query.get("hash"), {"Vary": "Accept"}
    if wanted and wanted != doc.etag:
        raise web.HTTPMovedPermanently(openapi.server_relative_url(group, doc.etag), headers=headers)
    if wanted:
        headers |= {"Cache-Control": "public, immutable",
                    "Expires": formatdate(time.time() + _A_YEAR_S, usegmt=True)}
    return await _openapi_reply(request, doc, headers)


async def _openapi_v2(request: web.Request, docs: openapi.OpenApi) -> web.Response:
    """The v2 document as protobuf (what kubectl asks for) or JSON; 406 if the client takes neither."""
    served = openapi.v2_format(request.headers.get("Accept", ""))
    if served is None:
        return web.Response(status=406, headers={"Vary": "Accept"})
    if served == "protobuf":
        return await _openapi_reply(request, docs.v2_protobuf, {"Vary": "Accept"}, openapi.V2_PROTOBUF)
    return await _openapi_reply(request, docs.v2_json, {"Vary": "Accept"})


async def _openapi_reply(request: web.Request, doc: openapi.Document, headers: dict[str, str] | None = None,
                         content_type: str = "application/json") -> web.Response:
    headers = {**(headers or {}), "Etag": f'"{doc.etag}"'}
    if openapi.etag_matches(request.headers.get("If-None-Match", ""), doc.etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=doc.body, content_type=content_type, headers=headers)


async def start_apiserver(
    kubeconfig_path: str | Path | None = None, **settings: Any
) -> tuple[str, Path, SimApiServer]:
    """Start a ``SimApiServer`` and write its kubeconfig (to a temp dir unless a path is given)."""
    server = SimApiServer(**settings)
    await server.start()
    if kubeconfig_path is None:
        kubeconfig_path = Path(tempfile.mkdtemp(prefix="gpubus-sim-")) / "kubeconfig"
    return server.url, server.write_kubeconfig(kubeconfig_path), server
