"""Every touch of nats-py's private attributes, gathered in one place.

nats-py 2 has no public API for a few things the bus relies on; each is reached here and nowhere
else, through :func:`_private`, which raises :class:`NatsPyChanged` naming the attribute when a
nats-py upgrade renamed it (tests/integration/test_natspy.py pins each one against a real server):

- ordered push consumers kept gapless across server restarts (``_jsi``: its consumer request
  ``_ccreq``, last stream sequence ``_sseq`` and ``reset_ordered_consumer``), see :func:`prepare`;
- a push subscription's heartbeat and flow-control tasks ended even when its UNSUB fails
  (``_hbtask``, ``_fctask``), see :func:`unsubscribe_push`;
- KV key validation without a KV handle (``nats.js.kv._is_key_valid``) and the JetStream API
  prefix of a context (``js._prefix``), for the KV's own conditional writes and direct reads;
- pull requests with our own batch, expiry and heartbeat on the pull subscription's inbox
  (``js._nc``, ``psub._nms``, ``psub._deliver``, ``psub._sub``), see :func:`request_pull`.

Must not know gpubus events, subjects or settings.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import nats.aio.client
import nats.errors
import nats.js.kv
from nats.aio.msg import Msg
from nats.js import JetStreamContext

log = logging.getLogger(__name__)


class NatsPyChanged(RuntimeError):
    """nats-py no longer has a private attribute the bus relies on: adapt this module."""


def _private(owner: Any, name: str) -> Any:
    try:
        return getattr(owner, name)
    except AttributeError:
        version = nats.aio.client.__version__
        raise NatsPyChanged(f"nats-py {version}: {type(owner).__name__} has no {name} (shared/bus/natspy.py)"
                            ) from None


def _jsi(sub: JetStreamContext.PushSubscription) -> Any:
    """nats-py's per-subscription JetStream state (set on every push subscription it creates)."""
    return _private(_private(sub, "_sub"), "_jsi")


# -- ordered push consumers ------------------------------------------------------------------
#
# nats-py re-creates an ordered consumer that lost its place (a consumer-sequence gap, two missed
# heartbeats) from the last stream sequence it delivered, by rewriting the original consumer
# request to "deliver by start sequence". Two details of that break a restart:
# - a consumer first created "by start time" keeps ``opt_start_time`` in that request, and the
#   server refuses a start sequence together with a start time (JetStream error 10094), so the
#   consumer is never re-created and the subscription goes silent;
# - before the first message its last sequence is 0, so a "new" consumer would replay the whole
#   stream.


def prepare(sub: JetStreamContext.PushSubscription, floor: int) -> None:
    """Make a later re-creation start after stream sequence ``floor`` and never by start time."""
    jsi = _jsi(sub)
    request = _private(jsi, "_ccreq")
    request.opt_start_time = None
    if request.name:
        _renamed_on_reset(jsi)
    if _private(jsi, "_sseq") == 0:
        jsi._sseq = floor


def _renamed_on_reset(jsi: Any) -> None:
    """A named consumer (node-scoped: :mod:`shared.bus.scope`) is re-created under a new name.

    Under its old name the create is an update of the consumer the server may still hold, and an
    update cannot change the deliver policy (JetStream error 10012): the consumer would come back
    only once the server dropped the old one for inactivity, seconds later. The old one goes so still.
    """
    reset = _private(jsi, "reset_ordered_consumer")

    async def renamed(sseq: int | None) -> bool:
        jsi._ccreq.name = secrets.token_hex(8)
        return bool(await reset(sseq))

    jsi.reset_ordered_consumer = renamed


async def resume(sub: JetStreamContext.PushSubscription, after: int, what: str) -> None:
    """Re-create the consumer now from stream sequence ``after + 1`` (a restarted server lost it)."""
    jsi = _jsi(sub)
    try:
        await _private(jsi, "reset_ordered_consumer")(max(int(_private(jsi, "_sseq") or 0), after) + 1)
    except (nats.errors.Error, OSError) as e:
        log.info("%s: not resumed now (%s); the heartbeat check retries", what, e)


async def unsubscribe_push(sub: JetStreamContext.PushSubscription) -> None:
    """Unsubscribe, and end nats-py's heartbeat/flow-control tasks even when the connection is gone.

    nats-py cancels those tasks only after a successful UNSUB; on a closed connection they would
    linger for up to two heartbeat intervals.
    """
    try:
        await sub.unsubscribe()
    except nats.errors.Error as e:
        log.debug("unsubscribe failed: %s", e)
    finally:
        jsi = _jsi(sub)
        for task in (_private(jsi, "_hbtask"), _private(jsi, "_fctask")):
            if task is not None:
                task.cancel()


# -- KV keys ---------------------------------------------------------------------------------


def is_valid_key(key: str) -> bool:
    """The key rule nats-py's KV applies (checked before our own conditional publish)."""
    valid: bool = _private(nats.js.kv, "_is_key_valid")(key)
    return valid


def api_prefix(js: JetStreamContext) -> str:
    """The JetStream API subject prefix of ``js`` (``$JS.API`` unless a domain changes it)."""
    return str(_private(js, "_prefix"))


# -- pull consumers --------------------------------------------------------------------------


def connection_closed(js: JetStreamContext) -> bool:
    """Whether the connection under ``js`` is closed for good."""
    return bool(_private(js, "_nc").is_closed)


async def request_pull(js: JetStreamContext, psub: JetStreamContext.PullSubscription, request: bytes) -> None:
    """Send a pull request (JSON: batch, expires, idle_heartbeat) whose replies come to ``psub``."""
    await _private(js, "_nc").publish(_private(psub, "_nms"), request, _private(psub, "_deliver"))


async def next_message(psub: JetStreamContext.PullSubscription, timeout: float) -> Msg:  # noqa: ASYNC109
    """The next message or status on the pull subscription's inbox (nats TimeoutError after ``timeout``)."""
    msg: Msg = await _private(psub, "_sub").next_msg(timeout=timeout)
    return msg
