"""Riding through the loss of a NATS server: a JetStream call retried while a stream elects a leader.

On a cluster, a stream whose leader died has no leader for a few seconds (RAFT election): a
publish or consumer create meets "no responders" (503) or a timeout, and a client that lost its
server is reconnecting to another. Such a call is retried here, with a short backoff, for up to
``BusSettings.failover_s``. A retried write must carry one ``Nats-Msg-Id`` for all its tries, so a
try that was stored but whose acknowledgement was lost is answered as a duplicate, not stored
twice (nor failed as a lost compare-and-set). Only raw nats-py errors are seen here; callers
translate what is finally raised. Knows nothing about keys, events or buckets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors

log = logging.getLogger(__name__)

T = TypeVar("T")

_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 0.5
#: HTTP-like status JetStream answers while a stream or the meta layer has no leader.
_UNAVAILABLE = 503

#: Errors that a leader election or a reconnect produces and that a later try may not meet.
_TRANSIENT: tuple[type[Exception], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
)


def is_transient(e: BaseException) -> bool:
    """True for the errors of a stream without a leader or a connection moving to another server."""
    if isinstance(e, nats.js.errors.APIError):
        return e.code == _UNAVAILABLE
    return isinstance(e, _TRANSIENT)


async def through_failover(call: Callable[[], Awaitable[T]], *, within_s: float, what: str) -> T:
    """``await call()``, tried again on a transient error until ``within_s`` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    delay = _BACKOFF_MIN_S
    tries = 1
    while True:
        try:
            result = await call()
        except Exception as e:
            if not is_transient(e) or loop.time() + delay > deadline:
                raise
            log.debug("%s: %s (try %d); trying again in %.2fs", what, type(e).__name__, tries, delay)
            await asyncio.sleep(delay)
            delay = min(2 * delay, _BACKOFF_MAX_S)
            tries += 1
            continue
        if tries > 1:
            log.info("%s: done at try %d (a NATS server or stream leader was lost meanwhile)", what, tries)
        return result
