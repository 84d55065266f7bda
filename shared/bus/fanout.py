"""Live events for many local handlers from one ordered push consumer, routed by the node token.

A process hosting many node-agents (the simulator hosts 100) would otherwise run one JetStream
pull consumer per agent, each polling with fetch requests and acking every message. A
:class:`Fanout` instead keeps ONE ordered push consumer over its subjects (the server pushes; no
fetch requests, no acks; flow control and idle heartbeats keep it honest) and hands each event,
in stream order, to the handler registered for the subject's last token (``<node>``), or else
to the catch-all route :data:`ANY` (a process that covers every node, like the simulator's monitor).

Delivery is gapless across disconnects and server restarts: nats-py's ordered consumer notices a
consumer-sequence gap or missing heartbeats and re-creates the consumer from the last stream
sequence it saw. Heartbeats are slow (:data:`IDLE_HEARTBEAT_S`), so that an idle cluster does not
exchange a message a second per node; an owner that expects an event and has not had it asks for
a resync (:meth:`Route.resync`), which re-creates the consumer at once. Events at or below the
last dispatched stream sequence are skipped, so a re-creation never hands an event twice, nor
anything published before the fanout started.
There is no redelivery after a handler failure (logged and counted): routes are for idempotent
state updates whose owner rebuilds from KV when it starts (the node-agent's pending decisions).
Undecodable messages are logged, counted and skipped. Knows nothing about what events mean.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from shared.bus import natspy
from shared.bus.consumer import DecodeErrorHandler, Deliver, Handler, report_undecodable, start_policy
from shared.bus.errors import translated
from shared.bus.stats import BusStats
from shared.codec import decode
from shared.errors import EventDecodeError

log = logging.getLogger(__name__)

#: The token of a route that takes every event no other route takes (a process covering all nodes).
ANY = "*"
#: Server heartbeat on an idle consumer; two missed ones make nats-py re-create it, seconds. On a
#: cluster the (R1) consumer may live on a server that dies while ours lives on: these heartbeats
#: notice that within 2 x 15 s (the Allocate lease's TTL); an Allocate that waits for its decision
#: does not wait for them, it resyncs (:meth:`Route.resync`). One heartbeat a second per node was
#: most of an idle cluster's NATS traffic.
IDLE_HEARTBEAT_S = 15.0


class Route:
    """One token's registration on one or more :class:`Fanout`; :meth:`stop` removes it."""

    def __init__(self, fanouts: Sequence[Fanout], token: str, handler: Handler) -> None:
        self._fanouts = tuple(fanouts)
        self.token = token
        self.handler = handler

    @property
    def running(self) -> bool:
        return any(f.routes.get(self.token) is self for f in self._fanouts)

    def resync(self) -> None:
        """Re-create the consumers from the last event each delivered, now (an event this route's
        owner expects has not come: its consumer may be on a server that lost it)."""
        for fanout in self._fanouts:
            fanout.resume()

    async def stop(self) -> None:
        for fanout in self._fanouts:
            if fanout.routes.get(self.token) is self:
                del fanout.routes[self.token]


class Fanout:
    """One ordered push consumer over ``subjects``; events go to the route of their last token."""

    def __init__(self, js: JetStreamContext, stream: str, subjects: Sequence[str], stats: BusStats, *,
                 deliver: Deliver = "new", on_decode_error: DecodeErrorHandler | None = None,
                 name: str | None = None) -> None:
        """``name``: the consumer's name, so that its create request names its one filter subject
        (node-scoped connections; see :mod:`shared.bus.scope`)."""
        self._js = js
        self._name = name
        self._deliver = deliver
        self._stream = stream
        self.subjects = tuple(subjects)
        self._stats = stats
        self._on_decode_error = on_decode_error
        self.routes: dict[str, Route] = {}
        self._sub: JetStreamContext.PushSubscription | None = None
        self._starting = asyncio.Lock()
        self._resuming: asyncio.Task[None] | None = None
        self._last_seq = 0
        self.dispatched = 0
        self.unrouted = 0

    async def add(self, token: str, handler: Handler) -> Route:
        """Route events whose subject ends in ``token`` to ``handler`` (from now on)."""
        route = Route((self,), token, handler)
        await self.attach(route)
        return route

    async def attach(self, route: Route) -> None:
        """Feed ``route`` from this fanout too (a route over several node-scoped consumers)."""
        async with self._starting:
            if self._sub is None:
                self._sub = await self._subscribe()
        if route.token in self.routes:
            raise ValueError(f"token {route.token!r} already has a route on {self.subjects}")
        self.routes[route.token] = route

    async def _subscribe(self) -> JetStreamContext.PushSubscription:
        config = api.ConsumerConfig()
        start_policy(config, self._deliver)
        if len(self.subjects) > 1:
            config.filter_subjects = list(self.subjects)  # nats-server >= 2.10
        if self._name is not None:
            config.name = self._name
        with translated(f"subscribe {', '.join(self.subjects)}"):
            # "new" starts after what the stream holds now; an earlier event is never ours.
            floor = (await self._js.stream_info(self._stream)).state.last_seq if self._deliver == "new" else 0
            sub = await self._js.subscribe(self.subjects[0], stream=self._stream, cb=self._on_msg,
                                           ordered_consumer=True, idle_heartbeat=IDLE_HEARTBEAT_S,
                                           config=config)
        # A "new" consumer re-created before its first event must not replay history. ("all" and
        # a since-time may replay from the start then; their handlers apply events idempotently.)
        self._last_seq = max(self._last_seq, floor)
        natspy.prepare(sub, self._last_seq)
        return sub

    def resume(self) -> None:
        """After a reconnect, or on a resync: continue at once from the last event seen on a fresh
        consumer (events seen already are skipped by their stream sequence).

        A restarted server has lost the old (memory) consumer; nats-py would notice only after two
        missed heartbeats. A failed re-creation is retried by nats-py's heartbeat check.
        """
        if self._sub is None or (self._resuming is not None and not self._resuming.done()):
            return
        self._resuming = asyncio.create_task(
            natspy.resume(self._sub, self._last_seq, f"fanout {self.subjects}"),
            name=f"bus-fanout-resume-{self.subjects[0]}")

    async def _on_msg(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        if seq <= self._last_seq:
            return  # replayed by a consumer re-creation: already handed over
        self._last_seq = seq
        route = self.routes.get(msg.subject.rpartition(".")[2]) or self.routes.get(ANY)
        if route is None:
            self.unrouted += 1
            return
        try:
            event = decode(msg.data)
        except EventDecodeError as e:
            await report_undecodable(msg, e, f"fanout {self.subjects}", self._stats, self._on_decode_error,
                                     logger=log)
            return
        try:
            await route.handler(event)
        except Exception:
            self._stats.handler_errors += 1
            log.exception("fanout %s: handler for %s failed on %s %s", self.subjects, route.token,
                          event.KIND, event.id)
            return
        self.dispatched += 1
        self._stats.consumed += 1

    async def stop(self) -> None:
        """Drop every route and the consumer (the server removes the ephemeral one)."""
        self.routes.clear()
        if self._resuming is not None:
            self._resuming.cancel()
            await asyncio.gather(self._resuming, return_exceptions=True)
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await natspy.unsubscribe_push(sub)
            except (TimeoutError, nats.errors.Error, OSError) as e:
                log.debug("fanout %s: unsubscribe failed: %s", self.subjects, e)
