"""Whether a NATS server refuses a token at CONNECT, asked over the plain protocol.

Not through nats-py: it leaves a refused connection's socket open, and the ResourceWarning of its
collection fails whichever test runs then (``filterwarnings = error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json


async def refused_at_connect(port: int, token: str, *, host: str = "127.0.0.1") -> bool:
    """CONNECT with ``token``; True when the server answers ``Authorization Violation``."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        await asyncio.wait_for(reader.readline(), 10)  # INFO
        connect = json.dumps({"auth_token": token, "verbose": False, "pedantic": False, "protocol": 1})
        writer.write(f"CONNECT {connect}\r\nPING\r\n".encode())
        await writer.drain()
        answer = await asyncio.wait_for(reader.readline(), 30)
        return b"authorization violation" in answer.lower()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
