"""JetStream consumers over the ``GPUBUS`` stream: a bounded pull loop per subscription.

The loop keeps standing pull requests (``batch`` messages, expiring after ``pull_expires_s``,
with server idle heartbeats) and asks for more when half of what is owed has arrived, as the
"consume" API of the newer NATS clients does: one request per ``batch/2`` messages, instead of
nats-py ``fetch``'s probe + lingering request (about three requests per message when events
trickle in). Owns decoding, acking and redelivery policy: undecodable messages are logged, counted and
acked; a handler that raises gets its message nak'd with a delay until ``max_deliver`` is
reached, so one poison message never stops the loop. Knows nothing about what events mean.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from shared.bus import natspy
from shared.bus.errors import translated
from shared.bus.failover import through_failover
from shared.bus.stats import BusStats
from shared.codec import decode
from shared.errors import EventDecodeError
from shared.events import Event

log = logging.getLogger(__name__)

Handler = Callable[[Event], Awaitable[None]]
#: ``on_decode_error(subject, data, error)`` for callers that must show bad messages (``gpubus tap``).
DecodeErrorHandler = Callable[[str, bytes, EventDecodeError], Awaitable[None]]
#: Where a consumer starts: "new", "all", "last_per_subject", or a unix timestamp (float seconds).
Deliver = str | float

_POLICIES = {
    "new": api.DeliverPolicy.NEW,
    "all": api.DeliverPolicy.ALL,
    "last_per_subject": api.DeliverPolicy.LAST_PER_SUBJECT,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Bounds of one subscription."""

    max_ack_pending: int = 256
    """Unacked messages the server lets this consumer have in flight."""
    batch: int = 64
    """Messages per fetch."""
    ack_wait_s: float = 30.0
    """A message not acked within this is redelivered (a stuck handler)."""
    max_deliver: int = 5
    """Delivery attempts before the server gives up on a message."""
    nak_delay_s: float = 1.0
    """Redelivery delay after a handler failure, multiplied by the attempt number."""
    inactive_threshold_s: float = 60.0
    """An ephemeral consumer left behind by a dead process is removed after this."""
    pull_expires_s: float = 30.0
    """How long one pull request waits on the server for messages, seconds."""


def consumer_config(subject: str, durable: str | None, deliver: Deliver,
                    opts: ConsumerOptions) -> api.ConsumerConfig:
    """The JetStream consumer config for a subscription (raises ValueError on a bad ``deliver``)."""
    config = api.ConsumerConfig(
        durable_name=durable,
        filter_subject=subject,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=opts.ack_wait_s,
        max_deliver=opts.max_deliver,
        max_ack_pending=opts.max_ack_pending,
        inactive_threshold=None if durable else opts.inactive_threshold_s,
    )
    start_policy(config, deliver)
    return config


def start_policy(config: api.ConsumerConfig, deliver: Deliver) -> None:
    """Set where a new consumer starts (raises ValueError on a bad ``deliver``)."""
    if isinstance(deliver, int | float) and not isinstance(deliver, bool):
        config.deliver_policy = api.DeliverPolicy.BY_START_TIME
        config.opt_start_time = datetime.datetime.fromtimestamp(deliver, tz=datetime.UTC)
    elif isinstance(deliver, str) and deliver in _POLICIES:
        config.deliver_policy = _POLICIES[deliver]
    else:
        raise ValueError(f"deliver must be one of {sorted(_POLICIES)} or a unix timestamp, got {deliver!r}")


class Subscription:
    """One consumer and the task that feeds its handler. :meth:`stop` finishes the message in hand."""

    def __init__(self, js: JetStreamContext, psub: JetStreamContext.PullSubscription, *,
                 stream: str, consumer: str, durable: bool, handler: Handler,
                 on_decode_error: DecodeErrorHandler | None, opts: ConsumerOptions, stats: BusStats) -> None:
        self._js = js
        self._psub = psub
        self._stream = stream
        self.consumer = consumer
        self._durable = durable
        self._handler = handler
        self._on_decode_error = on_decode_error
        self._opts = opts
        self._stats = stats
        self._stopping = False
        self._cancellable = False
        self._pulls = _Pulls(opts)
        self._repull: asyncio.Task[None] | None = None
        self._task = asyncio.create_task(self._run(), name=f"bus-consumer-{consumer}")
        self._task.add_done_callback(self._report_death)

    @property
    def running(self) -> bool:
        return not self._task.done()

    async def stop(self) -> None:
        """Stop fetching, let the handler finish its current message, then unsubscribe."""
        if self._stopping:
            await asyncio.gather(self._task, return_exceptions=True)
            return
        self._stopping = True
        if self._repull is not None:
            self._repull.cancel()
        if self._cancellable:
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        with contextlib.suppress(nats.errors.Error):
            await self._psub.unsubscribe()
        if not self._durable:
            with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                await self._js.delete_consumer(self._stream, self.consumer)

    def resume(self) -> None:
        """After a reconnect: the server may have dropped our pull requests (restarted); ask anew now
        rather than after two missed heartbeats."""
        if self._stopping or (self._repull is not None and not self._repull.done()):
            return
        self._pulls.reset()
        self._repull = asyncio.create_task(self._pull_quietly(), name=f"bus-consumer-repull-{self.consumer}")

    async def _pull_quietly(self) -> None:
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._pull(self._pulls)

    def _report_death(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("consumer %s died", self.consumer, exc_info=task.exception())

    async def _run(self) -> None:
        pulls = self._pulls
        backoff = 0.1
        while not self._stopping:
            if natspy.connection_closed(self._js):
                log.info("consumer %s stops: the NATS connection is closed", self.consumer)
                return
            try:
                if pulls.want_more(_now()):
                    await self._pull(pulls)
                msg = await self._next(pulls)
            except (nats.errors.Error, OSError) as e:
                if isinstance(e, nats.errors.TimeoutError):
                    pulls.silent(_now())  # no message, no heartbeat: the requests may be gone
                    continue
                if natspy.connection_closed(self._js):
                    log.info("consumer %s stops: the NATS connection is closed", self.consumer)
                    return
                # Disconnected or the server is restarting: wait and ask again.
                log.warning("consumer %s pull failed (%s); retrying in %.1fs", self.consumer, e, backoff)
                pulls.reset()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            status = JetStreamContext.is_status_msg(msg)
            if status is None:
                backoff = 0.1
                pulls.got_message()
                await self._process(msg)
            elif pulls.got_status(status, _now()):
                backoff = 0.1
            else:
                # e.g. 409 Consumer Deleted, 503 while the stream elects a leader: asking again at
                # once would only spin. Logged once per outage, not at every try.
                (log.warning if backoff == 0.1 else log.debug)(
                    "consumer %s: pull refused: %s %s; retrying in %.1fs", self.consumer, status,
                    (msg.headers or {}).get("Description", "").strip(), backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _REFUSED_BACKOFF_MAX_S)

    async def _pull(self, pulls: _Pulls) -> None:
        request = {"batch": self._opts.batch, "expires": int(pulls.expires_s * 1e9),
                   "idle_heartbeat": int(pulls.heartbeat_s * 1e9)}
        await natspy.request_pull(self._js, self._psub, json.dumps(request).encode())
        pulls.requested(_now())

    async def _next(self, pulls: _Pulls) -> Msg:
        """The next message or status on our inbox; TimeoutError after two missed heartbeats."""
        self._cancellable = True
        try:
            msg = await natspy.next_message(self._psub, pulls.wait_s(_now()))
        finally:
            self._cancellable = False
        return msg

    async def _process(self, msg: Msg) -> None:
        try:
            event = decode(msg.data)
        except EventDecodeError as e:
            await self._reject(msg, e)
            return
        try:
            await self._handler(event)
        except Exception:
            await self._handler_failed(msg, event)
            return
        await _settle(msg.ack(), self.consumer)
        self._stats.consumed += 1

    async def _reject(self, msg: Msg, error: EventDecodeError) -> None:
        await report_undecodable(msg, error, f"consumer {self.consumer}", self._stats, self._on_decode_error,
                                 logger=log)
        await _settle(msg.ack(), self.consumer)

    async def _handler_failed(self, msg: Msg, event: Event) -> None:
        self._stats.handler_errors += 1
        attempt = msg.metadata.num_delivered or 1
        final = attempt >= self._opts.max_deliver
        log.exception("consumer %s: handler failed on %s %s (attempt %d/%d%s)",
                      self.consumer, event.KIND, event.id, attempt, self._opts.max_deliver,
                      ", giving up" if final else "")
        if final:
            await _settle(msg.term(), self.consumer)
        else:
            await _settle(msg.nak(delay=self._opts.nak_delay_s * attempt), self.consumer)


async def report_undecodable(msg: Msg, error: EventDecodeError, who: str, stats: BusStats,
                             on_decode_error: DecodeErrorHandler | None, *, logger: logging.Logger) -> None:
    """Count and log a message that is no event, and show it to ``on_decode_error`` (whose failure
    is logged, never raised): never the end of a consumer. Settling the message is the caller's."""
    stats.decode_errors += 1
    logger.warning("%s: undecodable message on %s (%d bytes): %s", who, msg.subject, len(msg.data), error)
    if on_decode_error is not None:
        try:
            await on_decode_error(msg.subject, msg.data, error)
        except Exception:
            logger.exception("%s: decode error callback failed", who)


def _now() -> float:
    return time.monotonic()


class _Pulls:
    """Book-keeping of the standing pull requests: how many messages the server still owes us."""

    def __init__(self, opts: ConsumerOptions) -> None:
        self.batch = opts.batch
        self.expires_s = opts.pull_expires_s
        self.heartbeat_s = min(5.0, opts.pull_expires_s / 4)
        self._open: collections.deque[list[float]] = collections.deque()  # [deadline, owed]
        self._heard = 0.0

    def owed(self) -> int:
        return int(sum(owed for _, owed in self._open))

    def want_more(self, now: float) -> bool:
        """True when half a batch or less is owed, or the newest request is about to expire."""
        while self._open and self._open[0][0] + self.heartbeat_s <= now:
            self._open.popleft()  # expired and its 408 lost (a dropped connection)
        return self.owed() <= self.batch // 2 or self._open[-1][0] - now < self.heartbeat_s

    def requested(self, now: float) -> None:
        self._open.append([now + self.expires_s, float(self.batch)])
        self._heard = now

    def got_message(self) -> None:
        if self._open:
            self._open[0][1] -= 1
            if self._open[0][1] <= 0:
                self._open.popleft()

    def got_status(self, status: str, now: float) -> bool:
        """100 heartbeat, 408 a request expired: True. Anything else ended a request abnormally."""
        self._heard = now
        if status == _HEARTBEAT:
            return True
        if self._open:
            self._open.popleft()
        return status == _EXPIRED

    def silent(self, now: float) -> None:
        if now - self._heard >= 2 * self.heartbeat_s:
            self.reset()

    def reset(self) -> None:
        """Forget every request (a reconnect or a restarted server dropped them); ask anew."""
        self._open.clear()

    def wait_s(self, now: float) -> float:
        return max(0.05, self._heard + 2 * self.heartbeat_s - now)


_HEARTBEAT = "100"
#: Longest pause between pulls the server refuses: a stream's leader election takes seconds, and
#: the pull after it should not wait much longer than the election did.
_REFUSED_BACKOFF_MAX_S = 1.0
_EXPIRED = "408"


async def _settle(ack: Awaitable[None], consumer: str) -> None:
    """Ack/nak/term; if the connection dropped the server redelivers after ack_wait anyway."""
    try:
        await ack
    except (nats.errors.Error, OSError) as e:
        log.warning("consumer %s: ack failed: %s", consumer, e)


async def open_subscription(js: JetStreamContext, stream: str, subject: str, handler: Handler, *,
                            durable: str | None, deliver: Deliver, opts: ConsumerOptions,
                            on_decode_error: DecodeErrorHandler | None, stats: BusStats,
                            failover_s: float) -> Subscription:
    """Create (or bind to an existing durable) consumer and start its loop. The create rides
    through a stream's leader election or a lost server for up to ``failover_s`` (a tap started
    just after a NATS server restarted met a timeout otherwise)."""
    config = consumer_config(subject, durable, deliver, opts)

    async def create() -> tuple[JetStreamContext.PullSubscription, str]:
        psub = await js.pull_subscribe(subject, durable=durable, stream=stream, config=config,
                                       pending_msgs_limit=opts.batch * 4)
        try:
            return psub, durable or (await psub.consumer_info()).name
        except BaseException:  # a try that is given up must not leave its inbox subscribed
            with contextlib.suppress(Exception):
                await psub.unsubscribe()
            raise

    what = f"subscribe {subject}"
    with translated(what):
        psub, consumer = await through_failover(create, within_s=failover_s, what=what)
    return Subscription(js, psub, stream=stream, consumer=consumer, durable=durable is not None,
                        handler=handler, on_decode_error=on_decode_error, opts=opts, stats=stats)
