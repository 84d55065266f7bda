"""The kube-scheduler extender HTTP API (aiohttp): /filter, /prioritize, /bind, /healthz, /readyz, /metrics.

Handlers only decode, call placement/binder and encode. Errors map to the protocol here and nowhere
else: kube-scheduler reads failures from the ``Error`` field of a 200 answer (and logs nothing useful
for a non-200), so every filter/bind failure — oversized body, missing pod, unknown node, no fit,
lease timeout — is HTTP 200 with ``Error`` set. Only a body that is not JSON at all gets 400 (no
kube-scheduler sends one). ``/prioritize`` answers a bare list that has no ``Error`` field, so its
bad input gets 400 with ``{"Error": ...}``; kube-scheduler ignores prioritize failures anyway.
Every bad request is counted by kind; no input crashes a handler.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from services.scheduler.binder import Binder, PodCache
from services.scheduler.errors import BindError, ExtenderInputError
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.placement import Placement
from services.scheduler.wire import (
    MAX_BODY_BYTES,
    BadRequestKind,
    BindingArgs,
    ExtenderArgs,
    HostPriority,
    dumps,
    error_result,
    filter_result,
    load_body,
    parse_binding_args,
    parse_extender_args,
    too_large,
)
from shared.errors import AnnotationError, GpubusError, RequestError
from shared.events import Event, PodUnschedulable
from shared.model import NodeName, PodRequest
from shared.requests import DEFAULT_NAMES, ResourceNames, pod_request

log = logging.getLogger(__name__)

NOT_READY = "gpubus scheduler is still loading inventory and ledger from NATS; try again shortly"


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=dumps(value), status=status, content_type="application/json")


class Extender:
    """The HTTP face of the scheduler; build the aiohttp app with :meth:`app`."""

    def __init__(
        self,
        *,
        placement: Placement,
        binder: Binder,
        pods: PodCache,
        metrics: SchedulerMetrics,
        ready: Callable[[], bool],
        emit: Callable[[Event], None] | None = None,
        names: ResourceNames = DEFAULT_NAMES,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
        forward: Callable[[BindingArgs], Awaitable[tuple[str, str]]] | None = None,
    ) -> None:
        self._placement = placement
        self._binder = binder
        self._pods = pods
        self._metrics = metrics
        self._ready = ready
        self._emit = emit
        self._names = names
        self._clock = clock
        self._is_leader = is_leader
        self._forward = forward
        """A standby hands /bind to the leader through this (see :mod:`services.scheduler.forward`)."""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/filter", self.filter)
        app.router.add_post("/prioritize", self.prioritize)
        app.router.add_post("/bind", self.bind)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", make_aiohttp_handler(self._metrics.registry))
        return app

    # --- shared decoding -------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise too_large(request.content_length)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(None) from None
        return load_body(body)

    def _bad(self, verb: str, e: ExtenderInputError) -> None:
        self._metrics.bad_requests.labels(verb, e.kind).inc()
        self._metrics.decisions.labels(verb, "bad_request").inc()
        log.info("%s: refused a bad request (%s): %s", verb, e.kind, e)

    async def _args(self, request: web.Request, verb: str) -> tuple[ExtenderArgs, PodRequest]:
        args = parse_extender_args(await self._body(request))
        parsed = self._pods.request(args.pod)  # prioritize follows filter with the same pod
        if parsed is not None:
            return args, parsed
        try:
            return args, pod_request(args.pod, self._names)
        except RequestError as e:
            raise ExtenderInputError(BadRequestKind.BAD_POD, f"pod has an invalid GPU request: {e}") from None

    # --- verbs -----------------------------------------------------------------------------

    async def filter(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            return await self._filter(request)
        except ExtenderInputError as e:
            self._bad("filter", e)
            return _json(error_result(str(e)), 400 if e.kind == BadRequestKind.NOT_JSON else 200)
        finally:
            self._metrics.filter_seconds.observe(time.perf_counter() - started)

    async def _filter(self, request: web.Request) -> web.Response:
        args, pod = await self._args(request, "filter")
        if not pod.wants_gpu:
            self._metrics.decisions.labels("filter", "passthrough").inc()
            return _json(
                filter_result(passed=list(args.node_names), failed={}, unresolvable={}, nodes=args.nodes)
            )
        if not self._ready():
            self._metrics.decisions.labels("filter", "not_ready").inc()
            return _json(error_result(NOT_READY))
        self._binder.drop_provisional(pod.uid)  # judged afresh, without its own earlier slice
        try:
            outcome = self._placement.filter(pod, args.node_names, self._clock())
        except AnnotationError as e:
            self._metrics.decisions.labels("filter", "bad_annotation").inc()
            return _json(error_result(f"pod {pod.namespace}/{pod.name}: {e}"))
        self._pods.put(pod.uid, args.pod, pod)
        if outcome.passed:  # on the node prioritize will rank first (see Binder.provisional)
            first = self._placement.first_choice(pod, outcome.passed, self._clock())
            self._binder.provisional(pod, NodeName(first))
        for reason, n in outcome.reason_counts.items():
            self._metrics.reasons.labels(reason).inc(n)
        if not outcome.passed:
            self._unschedulable(pod, {**outcome.unresolvable, **outcome.failed})
        self._metrics.decisions.labels("filter", "fit" if outcome.passed else "no_fit").inc()
        return _json(
            filter_result(
                passed=outcome.passed,
                failed=outcome.failed,
                unresolvable=outcome.unresolvable,
                nodes=args.nodes,
            )
        )

    def _unschedulable(self, pod: PodRequest, reasons: dict[str, str]) -> None:
        if self._emit is not None:
            self._emit(PodUnschedulable(namespace=pod.namespace, name=pod.name, uid=pod.uid, reasons=reasons))

    async def prioritize(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            args, pod = await self._args(request, "prioritize")
        except ExtenderInputError as e:
            self._bad("prioritize", e)
            return _json({"Error": str(e)}, 400)
        finally:
            self._metrics.prioritize_seconds.observe(time.perf_counter() - started)
        if not pod.wants_gpu:
            scores = [(n, 0) for n in args.node_names]
        else:
            held = self._binder.provisional_node(pod.uid)
            scores = self._placement.scores(pod, args.node_names, self._clock(), favour=held)
        self._metrics.decisions.labels("prioritize", "scored").inc()
        priorities: list[HostPriority] = [{"Host": n, "Score": s} for n, s in scores]
        return _json(priorities)

    async def bind(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            outcome, error = await self._bind(request)
        finally:
            self._metrics.bind_seconds.observe(time.perf_counter() - started)
        self._metrics.decisions.labels("bind", outcome).inc()
        return _json({"Error": error}, 400 if outcome == BadRequestKind.NOT_JSON else 200)

    async def _bind(self, request: web.Request) -> tuple[str, str]:
        try:
            args = parse_binding_args(await self._body(request))
        except ExtenderInputError as e:
            self._metrics.bad_requests.labels("bind", e.kind).inc()
            return (BadRequestKind.NOT_JSON if e.kind == BadRequestKind.NOT_JSON else "bad_request"), str(e)
        if self._forward is not None and not self._is_leader():
            return await self._forward(args)
        return await self.bind_here(args)

    async def bind_here(self, args: BindingArgs) -> tuple[str, str]:
        """Bind in this replica (the leader; also what forwarded binds run): ``(outcome, Error)``."""
        if not self._ready():
            return "not_ready", NOT_READY
        try:
            return await self._binder.bind(args), ""
        except BindError as e:
            log.info("bind %s/%s -> %s refused: %s", args.pod_namespace, args.pod_name, args.node, e)
            return e.outcome, str(e)
        except GpubusError as e:
            log.warning("bind %s/%s -> %s failed: %s", args.pod_namespace, args.pod_name, args.node, e)
            return "unavailable", f"bind failed: {e}"

    # --- probes ----------------------------------------------------------------------------

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ready")
        return web.Response(text="loading inventory and ledger", status=503)
