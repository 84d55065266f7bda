"""One JetStream publish and its ack, reduced to the stream sequence.

nats-py's ``JetStreamContext.publish`` decodes every ack with the stdlib ``json`` and builds a
``PubAck`` dataclass of it. The per-pod path writes several (a bind: its lease, ledger entry and
decision; a verdict, a release; a node-agent: its outcome event and lease release), so this sends
the same request and reads the ack with orjson, raising the same nats-py errors for
:func:`shared.bus.errors.translated` to map as before. Knows nothing of what is published.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client


async def publish_acked(nc: Client, subject: str, data: bytes, *, headers: dict[str, str] | None,
                        timeout: float) -> int:  # noqa: ASYNC109 - the request's own timeout
    """Publish to the stream that holds ``subject``; the sequence it stored the message at."""
    try:
        msg = await nc.request(subject, data, timeout=timeout, headers=headers)
    except nats.errors.NoRespondersError:
        raise nats.js.errors.NoStreamResponseError from None
    try:
        ack = orjson.loads(msg.data)
        error = ack.get("error")
        if error is None:
            return int(ack["seq"])
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as e:
        raise nats.js.errors.APIError(description=f"malformed publish ack {msg.data[:200]!r}: {e}") from e
    nats.js.errors.APIError.from_error(error)  # raises the nats-py error for its code
    raise nats.js.errors.APIError(description=f"publish refused: {error}")  # from_error always raises
