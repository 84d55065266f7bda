"""Reading the ``GPUBUS`` stream as stored: live from a time, replays of a span, and its bounds.

Both readers are JetStream ordered push consumers (no acks, no durable state on the server,
nothing a read-only NATS user may not do) started by time or from the stream's first message.
They hand :class:`~shared.stream_messages.StoredMessage` values on; what they mean is the reader's.
nats-py errors become :class:`~shared.errors.BusUnavailable` here.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass

import nats.errors
import orjson
from nats.aio.msg import Msg
from nats.js import api

from shared.bus import natspy
from shared.bus.buckets import STREAM
from shared.bus.client import Bus
from shared.bus.consumer import start_policy
from shared.bus.errors import translated
from shared.errors import BusUnavailable
from shared.stream_messages import StoredMessage

log = logging.getLogger(__name__)

SUBJECTS = "gpubus.>"
IDLE_HEARTBEAT_S = 2.0

#: ``on_message(message, pending)``: ``pending`` = messages the consumer has not delivered yet.
MessageSink = Callable[[StoredMessage, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamBounds:
    """What the stream holds: how many messages, and the stream time of the first (0 when empty)."""

    messages: int
    first_at: float
    last_seq: int


def _stored(msg: Msg) -> tuple[StoredMessage, int]:
    meta = msg.metadata
    return StoredMessage(seq=meta.sequence.stream, at=meta.timestamp.timestamp(), subject=msg.subject,
                         data=msg.data), meta.num_pending


def _empty(info: api.ConsumerInfo) -> bool:
    """Nothing delivered and nothing pending: no message is stored from the consumer's start on.
    (Pending 0 alone is not enough: delivered messages may still wait in nats-py's queue.)"""
    delivered = info.delivered.consumer_seq if info.delivered is not None else 0
    return not info.num_pending and not delivered


async def bounds(bus: Bus) -> StreamBounds:
    """The stream's message count, first stream time and last sequence (BusUnavailable when NATS
    cannot say). nats-py's StreamState drops ``first_ts``: the API's JSON is read here."""
    with translated("stream info"):
        reply = await bus.nc.request(f"{natspy.api_prefix(bus.js)}.STREAM.INFO.{STREAM}", b"",
                                     timeout=bus.settings.request_timeout_s)
    state = orjson.loads(reply.data).get("state") or {}
    messages = int(state.get("messages") or 0)
    return StreamBounds(messages=messages, first_at=_unix(state.get("first_ts")) if messages else 0.0,
                        last_seq=int(state.get("last_seq") or 0))


class Follower:
    """The live reader: every message from a stream time on, in order, to ``on_message``; gapless
    across reconnects and server restarts (nats-py re-creates an ordered consumer from the last
    sequence it delivered once two idle heartbeats are missed; :func:`shared.bus.natspy.prepare`
    keeps that re-creation from being refused for its start time)."""

    def __init__(self, bus: Bus, on_message: MessageSink, *, subjects: str = SUBJECTS) -> None:
        self._bus = bus
        self._on_message = on_message
        self._subjects = subjects
        self._sub: nats.js.JetStreamContext.PushSubscription | None = None
        self._last_seq = 0
        self.handler_errors = 0

    async def start(self, start: float) -> bool:
        """Subscribe from stream time ``start``; True when the stream holds nothing from then on."""
        config = api.ConsumerConfig()
        start_policy(config, start)
        with translated(f"follow {self._subjects}"):
            self._sub = await self._bus.js.subscribe(
                self._subjects, stream=STREAM, cb=self._on_msg, ordered_consumer=True,
                idle_heartbeat=IDLE_HEARTBEAT_S, config=config)
            info = await self._sub.consumer_info()
        natspy.prepare(self._sub, self._last_seq)
        return _empty(info)

    async def _on_msg(self, msg: Msg) -> None:
        message, pending = _stored(msg)
        if message.seq <= self._last_seq:
            return
        self._last_seq = message.seq
        try:
            self._on_message(message, pending)
        except Exception:  # a bug in the reader's handler: logged and counted, the feed goes on
            self.handler_errors += 1
            log.exception("stream reader: handling message %d (%s) failed", message.seq, message.subject)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await natspy.unsubscribe_push(sub)
            except (TimeoutError, nats.errors.Error, OSError) as e:
                log.debug("stream follower: unsubscribe failed: %s", e)


async def replay(bus: Bus, *, start: float | None, after_seq: int, until: float,
                 on_message: Callable[[StoredMessage], None], timeout: float,  # noqa: ASYNC109
                 subjects: str = SUBJECTS) -> int:
    """Hand over every message stored after ``after_seq`` up to stream time ``until``.

    Starts at stream time ``start`` (None: the stream's first message). Returns how many were
    handed over; BusUnavailable when NATS cannot serve it within ``timeout`` seconds.
    """
    with translated("replay: stream info"):
        last = (await bus.js.stream_info(STREAM)).state.last_seq
    if last <= after_seq:
        return 0
    done = asyncio.Event()
    count = 0

    async def on_msg(msg: Msg) -> None:
        nonlocal count
        if done.is_set():
            return
        message, _ = _stored(msg)
        if message.at > until:
            done.set()
            return
        if message.seq > after_seq:
            on_message(message)
            count += 1
        if message.seq >= last:
            done.set()

    config = api.ConsumerConfig()
    start_policy(config, "all" if start is None else start)
    sub: nats.js.JetStreamContext.PushSubscription | None = None
    try:
        with translated("replay: subscribe"):
            sub = await bus.js.subscribe(subjects, stream=STREAM, cb=on_msg, ordered_consumer=True,
                                         idle_heartbeat=IDLE_HEARTBEAT_S, config=config)
            if _empty(await sub.consumer_info()):
                done.set()
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError as e:
        raise BusUnavailable(f"replay did not finish within {timeout:g}s ({count} messages read)") from e
    finally:
        if sub is not None:
            try:
                await natspy.unsubscribe_push(sub)
            except (TimeoutError, nats.errors.Error, OSError) as e:
                log.debug("replay: unsubscribe failed: %s", e)
    return count


def _unix(ts: object) -> float:
    """An RFC 3339 UTC time as JetStream writes it (nanoseconds, ``Z``) -> unix seconds; 0 if not one."""
    if not isinstance(ts, str):
        return 0.0
    whole, _, frac = ts.rstrip("Z").partition(".")
    try:
        moment = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.UTC)
        return moment.timestamp() + (float(f"0.{frac}") if frac.isdigit() else 0.0)
    except ValueError:
        return 0.0
