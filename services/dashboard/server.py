"""The dashboard's HTTP surface (aiohttp): pages, their data, live pushes, probes and metrics.

``GET`` only: the dashboard is read-only (aiohttp answers other methods with 405). Page paths
serve the one HTML shell (or an HTML 404 for a node, card or pod the view does not hold);
``/api/page`` answers a page's JSON; ``/api/stream`` pushes it again as server-sent events each
time the view changes (changes coalesce to one push per ``push_interval_s``); ``?at=<time>``
turns any page into the cluster as it was then. Errors become HTTP answers in :func:`_failure`
and nowhere else. Knows nothing about NATS: views arrive through :class:`Source`.
"""

from __future__ import annotations

import asyncio
import datetime
import html
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from services.dashboard.errors import BadQuery, BundleMissing, NotFound, ReplayUnavailable
from services.dashboard.metrics import DashboardStats
from services.dashboard.pages import PageOptions, known, page, status
from services.dashboard.timeline import Timeline
from services.dashboard.view import ClusterView
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

PAGE_PATHS = ("/", "/nodes", "/nodes/{name}", "/cards/{uuid}", "/pods", "/pods/{namespace}/{name}", "/events")
_CACHE_LIMIT = 256
BUILD_SHARE = 4.0
"""A page is rebuilt no sooner than this many times its build time after the last build."""
PageKey = tuple[str, tuple[tuple[str, str], ...]]


STATIC = Path(str(resources.files("services.dashboard") / "static"))
BUNDLE = "dist/app.js"
"""The pages' script and charts, built by ``npm run build`` in ``services/dashboard/web`` (setup.py
and scripts/bootstrap run it); never committed."""
MISSING_BUNDLE = ("this dashboard was installed without its browser bundle (static/dist/app.js): build it "
                  "with `npm ci && npm run build` in services/dashboard/web (Node.js 18+; scripts/bootstrap "
                  "does it), then reinstall or restart")


class Source(Protocol):
    """Where views come from (the composition root's live timeline and replays)."""

    timeline: Timeline

    def ready(self) -> bool: ...
    async def view_at(self, at: float) -> ClusterView: ...
    async def bounds(self) -> tuple[float, float]: ...


class Pulse:
    """Wakes every waiter at each change (a broadcast; an asyncio.Event wakes them only once)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    def waiter(self) -> asyncio.Event:
        return self._event


@dataclass(slots=True, kw_only=True)
class Deps:
    source: Source
    stats: DashboardStats
    registry: CollectorRegistry
    pulse: Pulse
    options: PageOptions
    push_interval_s: float
    max_streams: int
    clock: Callable[[], float] = time.time
    static_dir: Path = field(default_factory=lambda: STATIC)
    """The shell, the stylesheet and the built bundle (``dist/``)."""
    middlewares: tuple[Any, ...] = ()
    """Run before every handler, outermost first (the token gate, services/dashboard/access.py)."""
    streams: int = 0
    cache: dict[PageKey, _Built] = field(default_factory=dict)
    """Live pages as last built, by (path, query)."""

    def fresh_for(self, built: _Built) -> float:
        """How long a built page is served as is: the push interval, or four times what it took to
        build, whichever is longer, so no page (8000 cards in an overview) takes more than a fifth
        of the loop however busy the stream and however many browsers look."""
        return max(self.push_interval_s, BUILD_SHARE * built.took_s)


@dataclass(frozen=True, slots=True)
class _Built:
    version: int
    at: float
    """time.monotonic() when built."""
    took_s: float
    body: bytes


#: Set at shutdown: the open live pages wait for the next change and would hold a shutdown for
#: aiohttp's whole grace time (60 s; a pod's is 30 s) if nothing changed.
STOPPING = web.AppKey("stopping", asyncio.Event)


def build_app(deps: Deps) -> web.Application:
    app = web.Application(middlewares=[*deps.middlewares, _html_404(deps)])
    shell = (deps.static_dir / "index.html").read_bytes()
    bundled = (deps.static_dir / BUNDLE).is_file()
    if not bundled:
        log.error("the dashboard's browser bundle (static/%s) is missing: every page answers 503 until it is "
                  "built (npm ci && npm run build in services/dashboard/web, or scripts/bootstrap)", BUNDLE)
    for path in PAGE_PATHS:
        app.router.add_get(path, _shell_handler(deps, shell, bundled=bundled))
    app.router.add_get("/api/page", _page_handler(deps))
    app.router.add_get("/api/stream", _stream_handler(deps))
    app.router.add_get("/api/timeline", _timeline_handler(deps))
    app.router.add_static("/static/", str(deps.static_dir))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz_handler(deps))
    app.router.add_get("/metrics", make_aiohttp_handler(deps.registry))
    app[STOPPING] = asyncio.Event()
    app.on_shutdown.append(_end_live_streams)
    return app


async def _end_live_streams(app: web.Application) -> None:
    app[STOPPING].set()


def parse_at(raw: str | None) -> float | None:
    """``at``: unix seconds or an ISO 8601 time (UTC unless it names a zone); None when absent."""
    if raw is None or raw == "":
        return None
    try:
        at = float(raw)
    except ValueError:
        try:
            moment = datetime.datetime.fromisoformat(raw)
        except ValueError:
            raise BadQuery(f"at {raw[:40]!r}: expected unix seconds or an ISO 8601 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
        at = moment.timestamp()
    if not math.isfinite(at) or at <= 0:
        raise BadQuery(f"at {raw[:40]!r}: not a moment")
    return at


async def _view(deps: Deps, at: float | None) -> ClusterView:
    if at is None:
        return deps.source.timeline.view
    deps.stats.replays += 1
    try:
        return await deps.source.view_at(at)
    except ReplayUnavailable:
        deps.stats.replay_failures += 1
        raise


def _query(request: web.Request) -> dict[str, str]:
    return {k: v for k, v in request.query.items() if k not in ("path", "at")}


def _build(deps: Deps, view: ClusterView, path: str, query: Mapping[str, str], *, now: float,
           live: bool) -> bytes:
    """The page's JSON, from the cache while the live view has not changed or the page is still
    fresh (:meth:`Deps.fresh_for`): a busy cluster changes every few ms, and however many browsers
    look, each page is built at most once per interval."""
    key = (path, tuple(sorted(query.items())))
    version = deps.source.timeline.version
    if live:
        hit = deps.cache.get(key)
        if hit is not None and (hit.version == version or time.monotonic() - hit.at < deps.fresh_for(hit)):
            return hit.body
    feed = deps.source.timeline.feed if live else None
    started = time.monotonic()
    body = orjson.dumps({**page(view, feed, path, query, now=now, options=deps.options,
                                trends=deps.source.timeline.trends), "live": live})
    deps.stats.pages += 1
    if live:
        if len(deps.cache) >= _CACHE_LIMIT:
            deps.cache.clear()
        deps.cache[key] = _Built(version=version, at=time.monotonic(), took_s=time.monotonic() - started,
                                 body=body)
    return body


def _page_handler(deps: Deps) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            at = parse_at(request.query.get("at"))
            view = await _view(deps, at)
            path = request.query.get("path", "/")
            now = at if at is not None else deps.clock()
            body = _build(deps, view, path, _query(request), now=now, live=at is None)
        except Exception as e:
            return _failure(deps, e, as_json=True)
        where = orjson.dumps(status(view))
        return web.Response(body=body[:-1] + b',"status":' + where + b"}", content_type="application/json")

    return handle


def _stream_handler(deps: Deps) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        path, query = request.query.get("path", "/"), _query(request)
        if deps.streams >= deps.max_streams:
            deps.stats.streams_refused += 1
            return web.Response(status=503, text=f"more than {deps.max_streams} live pages open\n")
        try:
            _build(deps, deps.source.timeline.view, path, query, now=deps.clock(), live=True)
        except Exception as e:
            return _failure(deps, e, as_json=True)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        await response.prepare(request)
        deps.streams += 1
        pushing = asyncio.create_task(_push_until_gone(deps, response, path, query), name="dashboard-push")
        stopping = asyncio.create_task(request.app[STOPPING].wait(), name="dashboard-push-stop")
        try:
            await asyncio.wait((pushing, stopping), return_when=asyncio.FIRST_COMPLETED)
            if pushing.done():
                pushing.result()
        except ConnectionResetError:
            pass  # the browser went away
        finally:
            await cancel_and_wait(pushing, stopping, log_errors=False)  # result() raised any error
            deps.streams -= 1
        return response  # a stop ends the page's stream cleanly; the browser reconnects elsewhere

    return handle


async def _push_until_gone(deps: Deps, response: web.StreamResponse, path: str,
                           query: Mapping[str, str]) -> None:
    """The page whenever its content changed, the view's place in the stream whenever that did."""
    sent, last = -1, b""
    await response.write(b"retry: 2000\n\n")
    while True:
        waiter = deps.pulse.waiter()
        version = deps.source.timeline.version
        if version == sent:
            await waiter.wait()
            continue
        view = deps.source.timeline.view
        try:
            body = _build(deps, view, path, query, now=deps.clock(), live=True)
        except NotFound as e:  # the pod went away while its page was open
            await response.write(b"event: gone\ndata: " + orjson.dumps({"error": str(e)}) + b"\n\n")
            return
        if body != last:  # a 1000-node cluster changes every few ms; most pages do not
            await response.write(b"event: page\ndata: " + body + b"\n\n")
            deps.stats.pushes += 1
            last = body
        await response.write(b"event: status\ndata: " + orjson.dumps(status(view)) + b"\n\n")
        sent = version
        built = deps.cache.get((path, tuple(sorted(query.items()))))
        # coalesce: at most one push per interval (longer for a page that is slow to build)
        await asyncio.sleep(deps.push_interval_s if built is None else deps.fresh_for(built))


def _shell_handler(deps: Deps, shell: bytes, *,
                   bundled: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            if not bundled:
                raise BundleMissing(MISSING_BUNDLE)
            view = await _view(deps, parse_at(request.query.get("at")))
            if not known(view, request.path):
                raise NotFound(f"{request.path}: no such node, card, pod or page")
        except Exception as e:
            return _failure(deps, e, as_json=False)
        return web.Response(body=shell, content_type="text/html", charset="utf-8")

    return handle


def _timeline_handler(deps: Deps) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            first, last = await deps.source.bounds()
        except Exception as e:
            return _failure(deps, e, as_json=True)
        timeline = deps.source.timeline
        return web.json_response({"first": first, "last": last, "now": deps.clock(), "at": timeline.view.at,
                                  "checkpoints": timeline.checkpoint_times})

    return handle


_STATUS: dict[type[Exception], int] = {NotFound: 404, BadQuery: 400, ReplayUnavailable: 503,
                                       BundleMissing: 503}


def _failure(deps: Deps, error: Exception, *, as_json: bool) -> web.Response:
    """The one place errors become HTTP answers."""
    status = next((code for kind, code in _STATUS.items() if isinstance(error, kind)), 500)
    if status == 404:
        deps.stats.not_found += 1
    elif status == 400:
        deps.stats.bad_queries += 1
    elif status == 500:
        log.exception("dashboard request failed", exc_info=error)
    message = str(error) if status != 500 else f"internal error: {type(error).__name__}"
    if as_json:
        return web.json_response({"error": message, "status": status}, status=status)
    return web.Response(status=status, text=_error_page(status, message), content_type="text/html",
                        charset="utf-8")


def _error_page(status: int, message: str) -> str:
    title = {404: "Not found", 400: "Bad request", 503: "Unavailable"}.get(status, "Error")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{status} {title} - gpubus</title>"
            f"<link rel='stylesheet' href='/static/app.css'></head><body><main class='error'>"
            f"<h1>{status} {title}</h1><p>{html.escape(message)}</p>"
            f"<p><a href='/'>Overview</a> &middot; <a href='/nodes'>Nodes</a> &middot; "
            f"<a href='/pods'>Pods</a></p></main></body></html>")


def _html_404(deps: Deps) -> Callable[..., Awaitable[web.StreamResponse]]:
    Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return _failure(deps, NotFound(f"{request.path}: no such page"), as_json=False)

    return middleware


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def _readyz_handler(deps: Deps) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def readyz(request: web.Request) -> web.Response:
        ready = deps.source.ready()
        return web.json_response({"ok": ready, "caught_up": ready}, status=200 if ready else 503)

    return readyz
