"""Reading the ``GPUBUS`` stream for the dashboard: one live ordered consumer and time-travel replays.

Both are JetStream ordered push consumers (no acks, no durable state on the server, nothing the
dashboard's read-only NATS user may not do) started by time (``opt_start_time``) or from the
stream's first message. They hand :class:`Raw` messages on; decoding and folding are the
timeline's. nats-py errors become :mod:`shared.errors` / :mod:`services.dashboard.errors` here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from services.dashboard.errors import ReplayUnavailable
from services.dashboard.timeline import Raw
from shared.bus import STREAM, ordered
from shared.bus.consumer import start_policy
from shared.bus.errors import translated
from shared.bus.kv import unsubscribe_push
from shared.errors import BusUnavailable

log = logging.getLogger(__name__)

SUBJECTS = "gpubus.>"
IDLE_HEARTBEAT_S = 2.0

#: ``on_raw(message, pending)``: ``pending`` = messages the consumer has not delivered yet.
RawSink = Callable[[Raw, int], None]


def _raw(msg: Msg) -> tuple[Raw, int]:
    meta = msg.metadata
    return Raw(seq=meta.sequence.stream, at=meta.timestamp.timestamp(), subject=msg.subject,
               data=msg.data), meta.num_pending


def _empty(info: api.ConsumerInfo) -> bool:
    """Nothing delivered and nothing pending: no message is stored from the consumer's start on.
    (Pending 0 alone is not enough: delivered messages may still wait in nats-py's queue.)"""
    delivered = info.delivered.consumer_seq if info.delivered is not None else 0
    return not info.num_pending and not delivered


class Follower:
    """The live consumer: every message from ``start`` on, in order, to ``on_raw``; gapless across
    reconnects and server restarts (nats-py re-creates an ordered consumer from the last sequence it
    delivered once two idle heartbeats are missed; :func:`shared.bus.ordered.prepare` keeps that
    re-creation from being refused for its start time)."""

    def __init__(self, js: JetStreamContext, on_raw: RawSink) -> None:
        self._js = js
        self._on_raw = on_raw
        self._sub: JetStreamContext.PushSubscription | None = None
        self._last_seq = 0
        self.handler_errors = 0

    async def start(self, start: float) -> bool:
        """Subscribe from stream time ``start``; True when the stream holds nothing from then on."""
        config = api.ConsumerConfig()
        start_policy(config, start)
        with translated(f"follow {SUBJECTS}"):
            self._sub = await self._js.subscribe(SUBJECTS, stream=STREAM, cb=self._on_msg,
                                                 ordered_consumer=True, idle_heartbeat=IDLE_HEARTBEAT_S,
                                                 config=config)
            info = await self._sub.consumer_info()
        ordered.prepare(self._sub, self._last_seq)
        return _empty(info)

    async def _on_msg(self, msg: Msg) -> None:
        raw, pending = _raw(msg)
        if raw.seq <= self._last_seq:
            return
        self._last_seq = raw.seq
        try:
            self._on_raw(raw, pending)
        except Exception:  # a bug in the fold: logged and counted, the feed goes on
            self.handler_errors += 1
            log.exception("dashboard: folding message %d (%s) failed", raw.seq, raw.subject)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await unsubscribe_push(sub)
            except (TimeoutError, nats.errors.Error, OSError) as e:
                log.debug("dashboard follower: unsubscribe failed: %s", e)


async def replay(js: JetStreamContext, *, start: float | None, after_seq: int, until: float,
                 on_raw: Callable[[Raw], None], timeout: float) -> int:  # noqa: ASYNC109
    """Hand over every message stored after ``after_seq`` up to stream time ``until``.

    Starts at stream time ``start`` (None: the stream's first message). Returns how many were
    handed over; ReplayUnavailable when NATS cannot serve it within ``timeout`` seconds.
    """
    try:
        with translated("replay: stream info"):
            last = (await js.stream_info(STREAM)).state.last_seq
    except BusUnavailable as e:
        raise ReplayUnavailable(str(e)) from e
    if last <= after_seq:
        return 0
    done = asyncio.Event()
    count = 0

    async def on_msg(msg: Msg) -> None:
        nonlocal count
        if done.is_set():
            return
        raw, _ = _raw(msg)
        if raw.at > until:
            done.set()
            return
        if raw.seq > after_seq:
            on_raw(raw)
            count += 1
        if raw.seq >= last:
            done.set()

    config = api.ConsumerConfig()
    start_policy(config, "all" if start is None else start)
    sub: JetStreamContext.PushSubscription | None = None
    try:
        with translated("replay: subscribe"):
            sub = await js.subscribe(SUBJECTS, stream=STREAM, cb=on_msg, ordered_consumer=True,
                                     idle_heartbeat=IDLE_HEARTBEAT_S, config=config)
            if _empty(await sub.consumer_info()):
                done.set()
        await asyncio.wait_for(done.wait(), timeout)
    except TimeoutError as e:
        raise ReplayUnavailable(f"replay did not finish within {timeout:g}s ({count} messages read)") from e
    except BusUnavailable as e:
        raise ReplayUnavailable(str(e)) from e
    finally:
        if sub is not None:
            try:
                await unsubscribe_push(sub)
            except (TimeoutError, nats.errors.Error, OSError) as e:
                log.debug("replay: unsubscribe failed: %s", e)
    return count
