"""The webhook's HTTP surface: ``POST /webhook`` (and ``/mutate``), ``/healthz``, ``/readyz``, ``/metrics``.

The review handler only reads the body, decodes, calls :func:`admit`, encodes and emits the event;
every failure is mapped to an HTTP answer in :func:`_failure` and nowhere else. It knows nothing
about TLS files, NATS connections or Kubernetes clients: those arrive built, in :class:`Deps`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import hdrs, web
from prometheus_client.aiohttp import make_aiohttp_handler

from services.webhook.admission import AdmissionDecision, AdmissionSettings, admit, template_failure
from services.webhook.buslink import EventSink
from services.webhook.errors import BadRequestKind, BadReview
from services.webhook.events import event_for
from services.webhook.metrics import WebhookMetrics
from services.webhook.quota import NO_QUOTA, UNKNOWN, QuotaView
from services.webhook.reviews import AdmissionRequest, decode_review, encode_failure, encode_response
from services.webhook.templates import TemplateFailed, TemplateWriter
from shared.quota_cache import QuotaCache

log = logging.getLogger(__name__)

JSON = "application/json"
REVIEW_PATHS = ("/webhook", "/mutate")


@dataclass(frozen=True, slots=True, kw_only=True)
class Deps:
    """What the handlers use, built by the composition root."""

    settings: AdmissionSettings
    quotas: QuotaCache[QuotaView] | None
    """None without a Kubernetes API: quotas are not checked at admission."""
    events: EventSink
    metrics: WebhookMetrics
    max_body_bytes: int
    source: str = "webhook"
    bus_state: Callable[[], str] = lambda: "connecting"
    """``connected``, ``connecting`` or ``failed``; reported by /readyz, never required."""
    templates: TemplateWriter | None = None
    """DRA mode: makes the claim templates admitted pods name (None: the pod is refused if it needs one)."""


def build_runner(deps: Deps) -> web.AppRunner:
    """The app's runner; aiohttp does not decompress (see :func:`check_encoding`)."""
    return web.AppRunner(build_app(deps), access_log=None, handle_signals=False, auto_decompress=False)


def build_app(deps: Deps) -> web.Application:
    app = web.Application(client_max_size=deps.max_body_bytes)
    review = _review_handler(deps)
    for path in REVIEW_PATHS:
        app.router.add_post(path, review)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz_handler(deps))
    app.router.add_get("/metrics", make_aiohttp_handler(deps.metrics.registry))
    return app


async def _quotas(cache: QuotaCache[QuotaView] | None, namespace: str) -> QuotaView:
    """The namespace's quota as it is now (at most the cache's TTL old); UNKNOWN when unreadable."""
    if cache is None:
        return NO_QUOTA
    view = await cache.fresh(namespace)
    return UNKNOWN if view is None else view


def _review_handler(deps: Deps) -> Callable[[web.Request], Awaitable[web.Response]]:
    metrics = deps.metrics

    async def review(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            api_version, req = decode_review(await _read_body(request, deps.max_body_bytes))
            creating = req.get("operation") == "CREATE"
            quotas = await _quotas(deps.quotas, str(req.get("namespace") or "")) if creating else NO_QUOTA
            decision = await _with_templates(deps, admit(req, deps.settings, quotas), req)
            body = encode_response(
                api_version,
                req["uid"],
                allowed=decision.allowed,
                patch=decision.patch,
                code=decision.code,
                message=decision.message,
                warnings=decision.warnings,
            )
            _record(deps, decision, req)
            return web.Response(body=body, content_type=JSON)
        except Exception as e:
            return _failure(e, metrics)
        finally:
            metrics.latency.observe(time.perf_counter() - started)

    return review


async def _with_templates(deps: Deps, decision: AdmissionDecision,
                          req: AdmissionRequest) -> AdmissionDecision:
    """DRA mode: the templates the pod names exist before it is admitted (not on a dry run: the
    configuration says ``sideEffects: NoneOnDryRun``); the pod is refused if one cannot be made."""
    if not decision.allowed or not decision.templates or req.get("dryRun"):
        return decision
    try:
        writer = deps.templates or TemplateWriter(None)
        await writer.ensure(decision.templates)
    except TemplateFailed as e:
        log.warning("refused %s/%s: %s", req.get("namespace", ""), req.get("name", ""), e)
        return template_failure(str(e))
    return decision


async def _read_body(request: web.Request, limit: int) -> bytes:
    length = request.content_length
    if length is not None and length > limit:
        raise BadReview(
            BadRequestKind.TOO_LARGE, f"request body of {length} bytes exceeds the {limit} byte limit"
        )
    check_encoding(request.headers.get(hdrs.CONTENT_ENCODING, ""))  # before reading what is refused
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise BadReview(BadRequestKind.TOO_LARGE, f"request body exceeds the {limit} byte limit") from None


def check_encoding(encoding: str) -> None:
    """Refuse a compressed body: the API server sends AdmissionReviews as plain JSON.

    aiohttp would decompress by itself, answering bytes that do not decode with a 500 and a
    traceback, or an encoding it lacks with its own plain-text 400; refusing them here (the app
    runs with ``auto_decompress=False``) makes every one this webhook's counted 400.
    """
    if encoding.strip().lower() not in ("", "identity"):
        raise BadReview(
            BadRequestKind.BAD_ENCODING,
            f"Content-Encoding {encoding[:64]!r} is not accepted: send the AdmissionReview as plain JSON",
        )


def _record(deps: Deps, decision: AdmissionDecision, req: AdmissionRequest) -> None:
    deps.metrics.requests.labels("allowed" if decision.allowed else "denied").inc()
    deps.metrics.decisions.labels(decision.outcome.value).inc()
    if not decision.allowed:
        log.info("denied %s/%s: %s", req.get("namespace", ""), req.get("name", ""), decision.message)
    event = event_for(decision, req, deps.source)
    if event is not None:
        deps.events.emit(event)


def _failure(error: Exception, metrics: WebhookMetrics) -> web.Response:
    """The one place errors become HTTP answers: 413/400 for bad bodies, 500 for our own faults."""
    if isinstance(error, BadReview):
        status = 413 if error.kind is BadRequestKind.TOO_LARGE else 400
        metrics.bad_requests.labels(error.kind.value).inc()
        log.warning("bad admission request (%s): %s", error.kind.value, error.message)
        body = encode_failure(error.api_version, error.uid, status, error.message)
        return web.Response(status=status, body=body, content_type=JSON)
    metrics.requests.labels("errored").inc()
    log.exception("admission failed")
    body = encode_failure("", "", 500, f"internal error in the gpubus webhook: {type(error).__name__}")
    return web.Response(status=500, body=body, content_type=JSON)


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def _readyz_handler(deps: Deps) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def readyz(request: web.Request) -> web.Response:
        # Admission never depends on NATS, so the bus state is reported, not required.
        return web.json_response({"ok": True, "bus": deps.bus_state()})

    return readyz
