"""The bus: one NATS connection with JetStream events, KV state, leases and queries.

Owns the connection lifecycle (reconnect forever, logged), the acknowledged publish with
``Nats-Msg-Id`` dedup, the never-blocking ``emit`` outbox, consumers, KV handles, leases and
core request/reply. Every background task it starts is owned and stopped by :meth:`close`.
It must not know what any event means or which service uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Self

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as CoreSubscription
from nats.js import JetStreamContext

from shared.bus import schema
from shared.bus.acked import publish_acked
from shared.bus.buckets import LOCKS, STREAM
from shared.bus.consumer import (
    ConsumerOptions,
    DecodeErrorHandler,
    Deliver,
    Handler,
    Subscription,
    open_subscription,
)
from shared.bus.errors import EventRefused, QueryFailed, refusal_reason, translated, translated_publish
from shared.bus.failover import through_failover
from shared.bus.fanout import Fanout, Route
from shared.bus.kv import KV
from shared.bus.lease import Lease
from shared.bus.outbox import Outbox
from shared.bus.scope import scoped_filters
from shared.bus.settings import BusSettings, check_settings, connect_options, redact_url
from shared.bus.stats import BusStats
from shared.codec import MAX_EVENT_BYTES, encode
from shared.errors import BusRefused, BusUnavailable, clip
from shared.events import Event, subject_for
from shared.tasks import cancel_and_wait_through

log = logging.getLogger(__name__)

#: Pauses between tries of :meth:`Bus.ensure_schema` while JetStream elects its leaders, seconds.
_SCHEMA_BACKOFF_MIN_S = 0.1
_SCHEMA_BACKOFF_MAX_S = 2.0

#: ``handler(request_payload) -> reply_payload`` for :meth:`Bus.serve`.
QueryHandler = Callable[[bytes], Awaitable[bytes]]


class Service:
    """A core request/reply responder started by :meth:`Bus.serve`."""

    def __init__(self, sub: CoreSubscription) -> None:
        self._sub = sub

    async def stop(self) -> None:
        with contextlib.suppress(nats.errors.Error):
            await self._sub.drain()  # type: ignore[no-untyped-call]


class Bus:
    """Connected NATS with gpubus semantics. Create with :meth:`connect`, end with :meth:`close`."""

    def __init__(self, nc: Client, settings: BusSettings, source: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=settings.request_timeout_s)
        self.settings = settings
        self.source = source
        self.stats = BusStats()
        self._outbox = Outbox(self.publish, settings.outbox_limit, self.stats)
        self._subscriptions: list[Subscription] = []
        self._fanouts: dict[tuple[str, ...], Fanout] = {}
        self._services: list[Service] = []
        self._leases: weakref.WeakSet[Lease] = weakref.WeakSet()
        self._kvs: dict[str, KV] = {}
        self._closed = False

    @classmethod
    async def connect(cls, settings: BusSettings, *, source: str) -> Bus:
        """Connect (retrying up to ``initial_connect_timeout_s``); reconnects forever afterwards.

        Raises ``BusRefused`` at once when the settings cannot work or the server refuses our
        credentials or TLS, ``BusUnavailable`` when no server answered in time.
        """
        check_settings(settings)
        first = _FirstConnect(redact_url(settings.url), settings.initial_connect_timeout_s or None,
                              retry_refusals=settings.token_file is not None)
        stats_box: list[Bus] = []
        nc = Client()
        await first.run(nc, {**connect_options(settings), **_callbacks(settings, stats_box, first)})
        bus = cls(nc, settings, source)
        stats_box.append(bus)
        log.info("connected to NATS %s as %s", redact_url(nc.connected_url.geturl() if nc.connected_url
                                                          else settings.url), source)
        return bus

    # -- counters -------------------------------------------------------------------------
    @property
    def published(self) -> int:
        return self.stats.published

    @property
    def dropped(self) -> int:
        return self.stats.dropped

    @property
    def decode_errors(self) -> int:
        return self.stats.decode_errors

    @property
    def retries(self) -> int:
        return self.stats.retries

    @property
    def outbox_size(self) -> int:
        return len(self._outbox)

    @property
    def is_connected(self) -> bool:
        return bool(self.nc.is_connected)

    # -- schema ---------------------------------------------------------------------------
    async def ensure_schema(self) -> None:
        """Create or converge the ``GPUBUS`` stream and the inventory/allocations/locks buckets.

        A node-scoped connection (``settings.node``) may not change streams: it leaves them to
        the role users (the scheduler) and does nothing here.
        A JetStream cluster still electing its leaders times out or answers "temporarily
        unavailable": retried up to ``initial_connect_timeout_s``. ``BusRefused`` (replicas the
        cluster cannot place) is raised at once: waiting cannot fix a setting.
        """
        if self.settings.node is not None:
            return
        timeout = self.settings.initial_connect_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout if timeout else None
        backoff = _SCHEMA_BACKOFF_MIN_S
        while True:
            try:
                with translated("ensure schema"):
                    await schema.ensure_stream(self.js, schema.event_stream_config(self.settings))
                    for config in schema.bucket_configs(self.settings):
                        await schema.ensure_stream(self.js, config)
                return
            except BusRefused:
                raise
            except BusUnavailable as e:
                if deadline is not None and asyncio.get_running_loop().time() + backoff > deadline:
                    raise
                log.info("ensure schema: %s; trying again in %.1fs", e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, _SCHEMA_BACKOFF_MAX_S)

    # -- events ---------------------------------------------------------------------------
    async def publish(self, event: Event) -> None:
        """Publish to JetStream and wait for its ack; a repeated ``event.id`` is stored once.

        Raises ``EventRefused`` (logged and counted here; never retry it) when NATS can never
        store the event, ``BusUnavailable`` when it cannot now.
        """
        if not event.source:
            event = dataclasses.replace(event, source=self.source)
        what = f"publish {event.KIND}"
        data = b""
        try:
            data = _encoded(event, what)
            headers = {"Nats-Msg-Id": event.id}
            _check_size(what, len(data), _header_bytes(headers), self.nc.max_payload)
            with translated_publish(what):
                await publish_acked(self.nc, subject_for(event), data, headers=headers,
                                    timeout=self.settings.request_timeout_s)
        except EventRefused as e:
            self.stats.refused += 1
            log.warning("dropping %s %s (%d bytes): NATS can never store it: %s", event.KIND, event.id,
                        len(data), e)
            raise
        self.stats.published += 1

    def emit(self, event: Event) -> None:
        """Queue ``event`` for in-order delivery; never blocks or raises (see :class:`Outbox`)."""
        if self._closed:
            log.warning("emit after close: dropped %s %s", event.KIND, event.id)
            self.stats.dropped += 1
            return
        self._outbox.put(event)

    async def publish_in_order(self, event: Event, within_s: float | None = None) -> None:
        """Publish after everything emitted before it and wait for the ack.

        Raises ``BusUnavailable`` when not acknowledged within ``within_s`` (default: ``failover_s``,
        long enough to ride out a stream's leader election); the event then stays queued and is
        still sent, in order, when NATS is back.
        Raises ``EventRefused`` when NATS can never store it; the events behind it still go out.
        """
        if self._closed:
            raise BusUnavailable(f"publish {event.KIND}: the bus is closed")
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._outbox.put(event, ack)
        timeout = self.settings.failover_s if within_s is None else within_s
        try:
            await asyncio.wait_for(asyncio.shield(ack), timeout)
        except TimeoutError:
            raise BusUnavailable(f"publish {event.KIND}: not acknowledged within {timeout:g}s "
                                 "(queued; it goes out when NATS is back)") from None

    async def flush(self, within_s: float = 5.0) -> bool:
        """Wait until every emitted event is acknowledged; False if ``within_s`` passed first."""
        return await self._outbox.flush(within_s)

    async def subscribe(self, subject: str, handler: Handler, *, durable: str | None = None,
                        deliver: Deliver = "new", options: ConsumerOptions | None = None,
                        on_decode_error: DecodeErrorHandler | None = None) -> Subscription:
        """A JetStream consumer on ``subject`` feeding ``handler`` one event at a time, in order.

        ``deliver`` is "new", "all", "last_per_subject" or a unix timestamp (replay since then);
        it applies when the consumer is created (a durable resumes where it left off).
        """
        sub = await open_subscription(self.js, STREAM, subject, handler, durable=durable, deliver=deliver,
                                      opts=options or ConsumerOptions(), on_decode_error=on_decode_error,
                                      stats=self.stats, failover_s=self.settings.failover_s)
        self._subscriptions.append(sub)
        return sub

    async def route(self, subjects: tuple[str, ...], token: str, handler: Handler, *,
                    deliver: Deliver = "new") -> Route:
        """Live events on ``subjects`` whose last subject token is ``token`` go to ``handler``, in order.

        Every route of this bus over the same ``subjects`` shares ONE ordered push consumer
        (see :mod:`shared.bus.fanout`): many node-agents in one process cost one consumer, no
        fetch polling and no acks. ``token`` :data:`~shared.bus.fanout.ANY` takes the events no
        other route takes. ``deliver`` (as for :meth:`subscribe`) applies when the first route over
        ``subjects`` creates the consumer; later routes join it. Delivery is gapless across
        reconnects; a failing handler is logged and counted, not retried.
        """
        if self.settings.node is not None:
            return await self._scoped_route(subjects, token, handler, deliver)
        fanout = self._fanouts.get(subjects)
        if fanout is None:
            fanout = self._fanouts[subjects] = Fanout(self.js, STREAM, subjects, self.stats, deliver=deliver)
        return await fanout.add(token, handler)

    async def _scoped_route(self, subjects: tuple[str, ...], token: str, handler: Handler,
                            deliver: Deliver) -> Route:
        """A node-scoped connection: one named consumer per filter (:func:`scoped_filters`)."""
        assert self.settings.node is not None
        fanouts = []
        for subject in scoped_filters(subjects, self.settings.node):
            fanout = self._fanouts.get((subject,))
            if fanout is None:
                fanout = self._fanouts[(subject,)] = Fanout(self.js, STREAM, (subject,), self.stats,
                                                            deliver=deliver, name=secrets.token_hex(8))
            fanouts.append(fanout)
        route = Route(fanouts, token, handler)
        for fanout in fanouts:
            await fanout.attach(route)
        return route

    # -- state ----------------------------------------------------------------------------
    async def kv(self, bucket: str) -> KV:
        """The bucket (created by :meth:`ensure_schema`) as a typed :class:`KV`."""
        kv = self._kvs.get(bucket)
        if kv is None:
            what = f"open bucket {bucket}"
            with translated(what):  # a stream info: it waits out a leader election like a write
                handle = await through_failover(lambda: self.js.key_value(bucket),
                                                within_s=self.settings.failover_s, what=what)
                kv = KV(self.nc, self.js, handle, bucket,
                        timeout=self.settings.request_timeout_s, failover_s=self.settings.failover_s)
            self._kvs[bucket] = kv
        return kv

    async def lease(self, key: str, owner: str, *, ttl: float | None = None,
                    auto_renew: bool = True) -> Lease:
        """A lease on ``key`` in ``locks`` for ``owner`` (not yet acquired).

        ``ttl`` (whole seconds, at most the bucket's ``lock_ttl_s``) gives this key its own TTL;
        ``auto_renew`` renews every ttl/3 while held (off for locks another process releases).
        """
        bucket_ttl = self.settings.lock_ttl_s
        effective = min(ttl, bucket_ttl) if ttl else bucket_ttl
        lease = Lease(await self.kv(LOCKS), key, owner, ttl=effective,
                      per_key_ttl=ttl is not None and ttl < bucket_ttl, auto_renew=auto_renew)
        self._leases.add(lease)
        return lease

    # -- queries --------------------------------------------------------------------------
    async def request(self, subject: str, payload: bytes, timeout: float = 1.0) -> bytes:  # noqa: ASYNC109
        """Core request/reply (``gpubus.query.>``); NoResponders when nothing serves the subject,
        BusUnavailable on a timeout, QueryFailed when the responder answered that its handler failed."""
        with translated(f"request {subject}"):
            msg = await self.nc.request(subject, payload, timeout=timeout)
        if msg.headers and SERVICE_ERROR in msg.headers:
            code = msg.headers.get(SERVICE_ERROR_CODE, "500")
            raise QueryFailed(f"{subject}: the responder failed ({code}): {msg.headers[SERVICE_ERROR]}")
        return msg.data

    async def serve(self, subject: str, handler: QueryHandler, *, queue: str | None = None) -> Service:
        """Answer requests on ``subject``. A handler that raises is logged and counted, and the
        requester gets an error reply at once (NATS micro's headers) instead of waiting out its timeout.
        A requester may meet NoResponders for a moment after this returns (the server has not
        matched the new subscription yet): one that must reach the service asks again."""
        async def on_request(msg: Msg) -> None:
            try:
                reply = await handler(msg.data)
            except Exception as e:
                self.stats.handler_errors += 1
                log.exception("query handler for %s failed", msg.subject)
                if msg.reply:
                    headers = {SERVICE_ERROR: _header_value(f"{type(e).__name__}: {e}"),
                               SERVICE_ERROR_CODE: "500"}
                    with contextlib.suppress(nats.errors.Error):
                        await self.nc.publish(msg.reply, b"", headers=headers)
                return
            with contextlib.suppress(nats.errors.Error):
                await msg.respond(reply)

        with translated(f"serve {subject}"):
            sub = await self.nc.subscribe(subject, queue=queue or "", cb=on_request)
        service = Service(sub)
        self._services.append(service)
        return service

    # -- shutdown -------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        """``async with await Bus.connect(...) as bus:`` closes it at the end, as nats.py's client."""
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop consumers and renewals, flush the outbox (bounded), release leases, drain."""
        if self._closed:
            return
        self._closed = True
        for sub in self._subscriptions:
            await sub.stop()
        for fanout in self._fanouts.values():
            await fanout.stop()
        for service in self._services:
            await service.stop()
        await self._outbox.close(self.settings.flush_timeout_s if self.is_connected else 0.0)
        for lease in list(self._leases):
            if lease.held and lease.auto_renew:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(lease.release(), 1.0)
            await lease.close()
        with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
            await self.nc.drain()
        with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
            if not self.nc.is_closed:
                await self.nc.close()


#: The reply headers of a failed request, as NATS micro services send them.
SERVICE_ERROR = "Nats-Service-Error"
SERVICE_ERROR_CODE = "Nats-Service-Error-Code"


def _header_value(text: str) -> str:
    """One header line: no CR/LF (they would end the header block), bounded."""
    return clip(" ".join(text.split()), 200)


def _encoded(event: Event, what: str) -> bytes:
    try:
        return encode(event)
    except (TypeError, ValueError, OverflowError) as e:  # what msgpack raises for a value it cannot pack
        raise EventRefused(f"{what}: cannot be encoded: {e}") from e


def _header_bytes(headers: dict[str, str]) -> int:
    """Size of the header block nats-py sends (``NATS/1.0``, ``Key: value`` lines, a blank line)."""
    return len(b"NATS/1.0\r\n\r\n") + sum(len(f"{k}: {v}\r\n".encode()) for k, v in headers.items())


def _check_size(what: str, body: int, header: int, max_payload: int) -> None:
    """Refuse what the server would refuse (it counts headers in max_payload, and closes the
    connection over it; nats-py only checks the body) or what no consumer would decode."""
    if body + header > max_payload:
        raise EventRefused(f"{what}: {body} bytes and {header} header bytes exceed the server's "
                           f"max_payload of {max_payload} bytes")
    if body > MAX_EVENT_BYTES:
        raise EventRefused(f"{what}: {body} bytes exceed the {MAX_EVENT_BYTES} bytes consumers decode")


class _FirstConnect:
    """The initial connect: retried until its deadline, ended at once by a refusal."""

    def __init__(self, where: str, timeout: float | None, *, retry_refusals: bool = False) -> None:
        """``retry_refusals``: a refusal is retried like an outage (a token checked by NATS's auth
        callout is refused while the callout is down, and before it knows a new pod)."""
        self.where = where
        self.timeout = timeout
        self.retry_refusals = retry_refusals
        self._retried = 0
        self.done = False
        self._last: Exception | None = None
        self._refusal: str | None = None
        self._refused = asyncio.Event()

    def seen(self, e: Exception) -> None:
        """Called with every error of a connect attempt (nats-py's ``error_cb``)."""
        self._last = e
        reason = refusal_reason(e)
        if reason and self.retry_refusals and isinstance(e, nats.errors.Error):
            if not self._retried:
                log.warning("NATS at %s refused our token (%s); retrying until it is let in: the auth "
                            "callout may be down or not know this pod yet", self.where, reason)
            self._retried += 1
            return
        self._refusal = self._refusal or reason
        if self._refusal:
            self._refused.set()

    async def run(self, nc: Client, options: dict[str, Any]) -> None:
        connecting = asyncio.create_task(nc.connect(**options), name="bus-first-connect")
        refused = asyncio.create_task(self._refused.wait(), name="bus-first-connect-refused")
        try:
            await asyncio.wait({connecting, refused}, timeout=self.timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            # cancel_and_wait re-cancels: on Python 3.11 a cancel can be lost as nats-py's
            # open_connection fails on a refused port, and its connect loop then retries forever;
            # and it finishes even when our owner cancels us again meanwhile
            await cancel_and_wait_through(connecting, refused)
            self.done = True
        failure = connecting.exception() if not connecting.cancelled() else None
        if connecting.cancelled() or failure is not None:
            with contextlib.suppress(Exception):
                await nc.close()
            raise self._error(failure) from (failure or self._last)

    def _error(self, failure: BaseException | None) -> BusUnavailable:
        cause = failure or self._last
        if self._refusal:
            return BusRefused(f"NATS at {self.where} refused the connection: {self._refusal}: {cause}")
        if isinstance(failure, ValueError):
            return BusRefused(f"bus setting url: cannot use {self.where}: {failure}")
        return BusUnavailable(f"cannot connect to NATS at {self.where} within {self.timeout}s: {cause!r}")


def _callbacks(settings: BusSettings, bus_box: list[Bus],
               first: _FirstConnect) -> dict[str, Callable[..., Awaitable[None]]]:
    """Connection callbacks (nats-py requires ``async def``); they log and count, nothing more."""
    url = redact_url(settings.url)

    async def disconnected() -> None:
        if bus_box and bus_box[0]._closed:
            return  # our own close(), not an outage
        log.warning("disconnected from NATS %s; reconnecting", url)
        if bus_box:
            bus_box[0].stats.disconnects += 1

    async def reconnected() -> None:
        log.info("reconnected to NATS %s", url)
        if bus_box:
            bus_box[0].stats.reconnects += 1
            for sub in bus_box[0]._subscriptions:
                sub.resume()
            for fanout in bus_box[0]._fanouts.values():
                fanout.resume()
            for kv in bus_box[0]._kvs.values():
                kv.resume()

    async def error(e: Exception) -> None:
        if not first.done:
            first.seen(e)
        log.warning("NATS error: %s", e)

    async def closed() -> None:
        log.info("NATS connection closed")

    return {"disconnected_cb": disconnected, "reconnected_cb": reconnected,
            "error_cb": error, "closed_cb": closed}
