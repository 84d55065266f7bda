"""Record the ``GPUBUS`` stream of a run to a file, and replay it into another server's stream.

A recording is a msgpack list of ``{"subject", "data", "msg_id"}`` in stream order: the
bytes exactly as stored, so a replay feeds consumers what the recorded run's services published.
``tests/fixtures/events/recorded-run.msgpack`` was made from a ``gpubus up`` run (two nodes, the
examples/ pods submitted, one refused by the webhook) with::

    python tests/event_recording.py nats://127.0.0.1:4222 tests/fixtures/events/recorded-run.msgpack
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import msgpack
import nats
from nats.js import JetStreamContext

from shared.bus import STREAM

Recorded = dict[str, Any]


async def record(js: JetStreamContext) -> list[Recorded]:
    """Every message the stream holds now, in order (direct gets by sequence)."""
    info = await js.stream_info(STREAM)
    out: list[Recorded] = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(STREAM, seq)
        msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
        out.append({"subject": msg.subject, "data": msg.data or b"", "msg_id": msg_id})
    return out


async def replay(js: JetStreamContext, messages: list[Recorded], replay_id: str) -> None:
    """Publish each recorded message again, acked, bodies unchanged. The ``Nats-Msg-Id`` is the
    recorded one plus ``replay_id``: JetStream remembers ids past a purge (its duplicate window),
    so a second replay with the same ids would store nothing."""
    for m in messages:
        headers = {"Nats-Msg-Id": f"{m['msg_id']}.{replay_id}"} if m["msg_id"] else None
        await js.publish(m["subject"], m["data"], headers=headers)


def load(path: Path) -> list[Recorded]:
    loaded: list[Recorded] = msgpack.unpackb(path.read_bytes(), raw=False)
    return loaded


async def _record(url: str) -> list[Recorded]:
    nc = await nats.connect(url)
    try:
        return await record(nc.jetstream())
    finally:
        await nc.close()


if __name__ == "__main__":
    out = Path(sys.argv[2])
    messages = asyncio.run(_record(sys.argv[1]))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(msgpack.packb(messages, use_bin_type=True))
    print(f"recorded {len(messages)} messages to {out}")
