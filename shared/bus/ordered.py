"""Keeping nats-py's ordered push consumers gapless across server restarts.

nats-py re-creates an ordered consumer that lost its place (a consumer-sequence gap, two missed
heartbeats) from the last stream sequence it delivered, by rewriting the original consumer
request to "deliver by start sequence". Two details of that break a restart:

- a consumer first created "by start time" keeps ``opt_start_time`` in that request, and the
  server refuses a start sequence together with a start time (JetStream error 10094), so the
  consumer is never re-created and the subscription goes silent;
- before the first message its last sequence is 0, so a "new" consumer would replay the whole
  stream.

:func:`prepare` fixes both right after subscribing; :func:`resume` re-creates at once after a
reconnect instead of waiting for the heartbeat check. Both reach into nats-py's ``_jsi`` (there
is no public hook) and do nothing where it is absent.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import nats.errors
from nats.js import JetStreamContext

log = logging.getLogger(__name__)


def prepare(sub: JetStreamContext.PushSubscription, floor: int) -> None:
    """Make a later re-creation start after stream sequence ``floor`` and never by start time."""
    jsi = getattr(sub._sub, "_jsi", None)
    if jsi is None:
        return
    request = getattr(jsi, "_ccreq", None)
    if request is not None:
        request.opt_start_time = None
        if request.name:
            _renamed_on_reset(jsi)
    if getattr(jsi, "_sseq", None) == 0:
        jsi._sseq = floor


def _renamed_on_reset(jsi: Any) -> None:
    """A named consumer (node-scoped: :mod:`shared.bus.scope`) is re-created under a new name.

    Under its old name the create is an update of the consumer the server may still hold, and an
    update cannot change the deliver policy (JetStream error 10012): the consumer would come back
    only once the server dropped the old one for inactivity, seconds later. The old one goes so still.
    """
    reset = jsi.reset_ordered_consumer

    async def renamed(sseq: int | None) -> bool:
        jsi._ccreq.name = secrets.token_hex(8)
        return bool(await reset(sseq))

    jsi.reset_ordered_consumer = renamed


async def resume(sub: JetStreamContext.PushSubscription, after: int, what: str) -> None:
    """Re-create the consumer now from stream sequence ``after + 1`` (a restarted server lost it)."""
    jsi = getattr(sub._sub, "_jsi", None)
    if jsi is None:
        return
    try:
        await jsi.reset_ordered_consumer(max(int(jsi._sseq or 0), after) + 1)
    except (nats.errors.Error, OSError) as e:
        log.info("%s: not resumed now (%s); the heartbeat check retries", what, e)
