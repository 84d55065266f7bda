"""The kube-scheduler extender HTTP API (aiohttp): /filter, /prioritize, /bind, /healthz, /readyz, /metrics.

Handlers only decode, call placement/binder and encode. Errors map to the protocol in one place,
:meth:`Extender._failure`, the boundary every verb runs inside (:meth:`Extender._answer`, which also
times it): kube-scheduler reads failures from the ``Error`` field of a 200 answer (and logs nothing useful
for a non-200), so every filter/bind failure — oversized body, missing pod, unknown node, no fit,
lease timeout — is HTTP 200 with ``Error`` set. Only a body that is not JSON at all gets 400 (no
kube-scheduler sends one). ``/prioritize`` answers a bare list that has no ``Error`` field, so its
bad input gets 400 with ``{"Error": ...}``; kube-scheduler ignores prioritize failures anyway.
Every bad request is counted by kind; no input crashes a handler, and a fault of ours is an answer
in the protocol (counted as the ``error`` outcome, logged with its traceback), never aiohttp's 500 page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from services.scheduler.binder import Leadership
from services.scheduler.errors import BindError, ExtenderInputError
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.placement import Placement
from services.scheduler.pod_cache import PodCache
from services.scheduler.podconfirm import PodConfirmer
from services.scheduler.requeue import Requeuer
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
from shared.model import NodeName, PodRequest, PodUID
from shared.requests import DEFAULT_NAMES, ResourceNames, pod_request

log = logging.getLogger(__name__)

NOT_READY = "gpubus scheduler is still loading inventory and ledger from NATS; try again shortly"


#: The longest per-node reason an event carries (HAMi's are well under it).
_REASON_MAX = 1024


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(body=dumps(value), status=status, content_type="application/json")


class PodBinder(Protocol):
    """The bind side (:class:`~services.scheduler.binder.Binder`): filter's provisional slice and /bind."""

    def drop_provisional(self, uid: PodUID) -> None: ...
    def provisional(self, request: PodRequest, node: NodeName) -> bool: ...
    def provisional_node(self, uid: PodUID) -> NodeName | None: ...
    async def bind(self, args: BindingArgs) -> str: ...


class Readiness(Protocol):
    """Whether inventory and ledger are loaded (:class:`~services.scheduler.state.State`)."""

    @property
    def ready(self) -> bool: ...


class EventSink(Protocol):
    """Where ``pod.unschedulable`` goes (:class:`shared.bus.Bus`)."""

    def emit(self, event: Event) -> None: ...


class Forwarder(Protocol):
    """How a standby hands /bind to the leader (:class:`~services.scheduler.forward.BindForwarder`)."""

    async def forward(self, args: BindingArgs) -> tuple[str, str]: ...


#: A verb's work: the request in, the answer out; errors are raised to :meth:`Extender._answer`.
Verb = Callable[[web.Request], Awaitable[web.Response]]


class Extender:
    """The HTTP face of the scheduler; build the aiohttp app with :meth:`app`."""

    def __init__(
        self,
        *,
        placement: Placement,
        binder: PodBinder,
        pods: PodCache,
        metrics: SchedulerMetrics,
        state: Readiness,
        leadership: Leadership,
        forwarder: Forwarder,
        events: EventSink | None = None,
        names: ResourceNames = DEFAULT_NAMES,
        clock: Callable[[], float] = time.time,
        confirmer: PodConfirmer | None = None,
        known_node: Callable[[str], bool] | None = None,
        requeuer: Requeuer | None = None,
    ) -> None:
        self._requeuer = requeuer
        """Told which confirmed pods found no node, and which fit now (see requeue.py)."""
        self._placement = placement
        self._confirmer = confirmer
        """Events name only pods the API server confirms (a /filter body is a claim)."""
        self._known_node = known_node or (lambda name: NodeName(name) in placement.ledger)
        """Events name only nodes the scheduler knows (a /filter body may list any string)."""
        self._binder = binder
        self._pods = pods
        self._metrics = metrics
        self._state = state
        self._leadership = leadership
        self._forwarder = forwarder
        """A standby hands /bind to the leader through this (see :mod:`services.scheduler.forward`)."""
        self._events = events
        self._names = names
        self._clock = clock
        self._seconds = {
            "filter": metrics.filter_seconds,
            "prioritize": metrics.prioritize_seconds,
            "bind": metrics.bind_seconds,
        }

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/filter", self.filter)
        app.router.add_post("/prioritize", self.prioritize)
        app.router.add_post("/bind", self.bind)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", make_aiohttp_handler(self._metrics.registry))
        return app

    # --- the error boundary ----------------------------------------------------------------

    async def filter(self, request: web.Request) -> web.Response:
        return await self._answer("filter", self._filter, request)

    async def prioritize(self, request: web.Request) -> web.Response:
        return await self._answer("prioritize", self._prioritize, request)

    async def bind(self, request: web.Request) -> web.Response:
        return await self._answer("bind", self._bind, request)

    async def _answer(self, verb: str, work: Verb, request: web.Request) -> web.Response:
        """Run a verb, time it, and turn whatever it raises into the protocol's answer."""
        started = time.perf_counter()
        try:
            return await work(request)
        except Exception as e:
            return self._failure(verb, e)
        finally:
            self._seconds[verb].observe(time.perf_counter() - started)

    def _failure(self, verb: str, error: Exception) -> web.Response:
        """The one place errors become extender answers. kube-scheduler reads a filter or bind
        failure from the ``Error`` of a 200 answer; a body that is not JSON at all is a 400 (no
        kube-scheduler sends one); prioritize's bare list has no ``Error``, so its failures are a
        400 (bad input) or 500 (ours) with ``{"Error"}``. Bad input is counted by kind; our own
        faults are counted as the ``error`` outcome and logged with their traceback."""
        if isinstance(error, ExtenderInputError):
            not_json = error.kind == BadRequestKind.NOT_JSON
            self._metrics.bad_requests.labels(verb, error.kind).inc()
            outcome = error.kind if not_json and verb == "bind" else "bad_request"
            self._metrics.decisions.labels(verb, outcome).inc()
            log.info("%s: refused a bad request (%s): %s", verb, error.kind, error)
            status = 400 if not_json or verb == "prioritize" else 200
            return _json(error_result(str(error)) if verb == "filter" else {"Error": str(error)}, status)
        self._metrics.decisions.labels(verb, "error").inc()
        log.exception("%s failed", verb)
        message = f"internal error in the gpubus scheduler: {type(error).__name__}"
        if verb == "filter":
            return _json(error_result(message))
        return _json({"Error": message}, 500 if verb == "prioritize" else 200)

    # --- shared decoding -------------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any]:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise too_large(request.content_length)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(None) from None
        return load_body(body)

    async def _args(self, request: web.Request) -> tuple[ExtenderArgs, PodRequest]:
        args = parse_extender_args(await self._body(request))
        parsed = self._pods.request(args.pod)  # prioritize follows filter with the same pod
        if parsed is not None:
            return args, parsed
        try:
            return args, pod_request(args.pod, self._names)
        except RequestError as e:
            raise ExtenderInputError(BadRequestKind.BAD_POD, f"pod has an invalid GPU request: {e}") from None

    # --- verbs -----------------------------------------------------------------------------

    async def _filter(self, request: web.Request) -> web.Response:
        args, pod = await self._args(request)
        if not pod.wants_gpu:
            self._metrics.decisions.labels("filter", "passthrough").inc()
            return _json(
                filter_result(passed=list(args.node_names), failed={}, unresolvable={}, nodes=args.nodes)
            )
        if not self._state.ready:
            self._metrics.decisions.labels("filter", "not_ready").inc()
            return _json(error_result(NOT_READY))
        self._binder.drop_provisional(pod.uid)  # judged afresh, without its own earlier slice
        try:
            outcome = self._placement.filter(pod, args.node_names, self._clock())
        except AnnotationError as e:
            self._metrics.decisions.labels("filter", "bad_annotation").inc()
            return _json(error_result(f"pod {pod.namespace}/{pod.name}: {e}"))
        self._pods.put(pod.uid, args.pod, pod)
        if outcome.passed and self._requeuer is not None:
            self._requeuer.placed(pod.uid)
        if outcome.passed:  # on the node prioritize will rank first (see Binder.provisional)
            first = self._placement.first_choice(pod, outcome.passed, self._clock())
            self._binder.provisional(pod, NodeName(first))
        for reason, n in outcome.reason_counts.items():
            self._metrics.reasons.labels(reason).inc(n)
        if not outcome.passed:
            await self._unschedulable(pod, {**outcome.unresolvable, **outcome.failed})
        self._metrics.decisions.labels("filter", "fit" if outcome.passed else "no_fit").inc()
        return _json(
            filter_result(
                passed=outcome.passed,
                failed=outcome.failed,
                unresolvable=outcome.unresolvable,
                nodes=args.nodes,
            )
        )

    async def _unschedulable(self, pod: PodRequest, reasons: dict[str, str]) -> None:
        """Publish why the pod fits nowhere: only for a pod the API server has, only about nodes
        the scheduler knows, each reason bounded (what a request claims is not an event)."""
        if self._events is None:
            return
        confirmer = self._confirmer
        if confirmer is not None and not await confirmer.confirm(pod.namespace, pod.name, pod.uid):
            self._metrics.input_error("filter", "unconfirmed_pod")
            log.info("pod %.253s/%.253s (%.64s): not confirmed by the API server; no event",
                     pod.namespace, pod.name, pod.uid)
            return
        known = {n: why[:_REASON_MAX] for n, why in reasons.items() if self._known_node(n)}
        if len(known) < len(reasons):
            self._metrics.input_error("filter", "unknown_node")
        event = PodUnschedulable(namespace=pod.namespace, name=pod.name, uid=pod.uid, reasons=known)
        self._events.emit(event)
        if self._requeuer is not None:
            self._requeuer.refused(pod.namespace, pod.name, pod.uid)

    async def _prioritize(self, request: web.Request) -> web.Response:
        args, pod = await self._args(request)
        if not pod.wants_gpu:
            scores = [(n, 0) for n in args.node_names]
        else:
            held = self._binder.provisional_node(pod.uid)
            scores = self._placement.scores(pod, args.node_names, self._clock(), favour=held)
        self._metrics.decisions.labels("prioritize", "scored").inc()
        priorities: list[HostPriority] = [{"Host": n, "Score": s} for n, s in scores]
        return _json(priorities)

    async def _bind(self, request: web.Request) -> web.Response:
        args = parse_binding_args(await self._body(request))
        if self._leadership.is_leader:
            outcome, error = await self.bind_here(args)
        else:
            outcome, error = await self._forwarder.forward(args)
        self._metrics.decisions.labels("bind", outcome).inc()
        return _json({"Error": error})

    async def bind_here(self, args: BindingArgs) -> tuple[str, str]:
        """Bind in this replica (the leader; also what forwarded binds run): ``(outcome, Error)``."""
        if not self._state.ready:
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
        if self._state.ready:
            return web.Response(text="ready")
        return web.Response(text="loading inventory and ledger", status=503)
