"""The first connect ends at its deadline even when the client under it loses a cancel.

On Python 3.11 ``asyncio.wait_for`` drops a cancel that lands as its inner call fails; nats-py
awaits ``open_connection`` under one, so a refused port can turn our cancel into one more
"outage" and its connect loop retries forever. The client here does exactly that (its first
cancel becomes an ``OSError`` it retries), so the test needs no race to be won.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from shared.bus.client import _FirstConnect
from shared.errors import BusUnavailable


class _LosesTheFirstCancel:
    """Retries its connect like nats-py; the first cancel it receives becomes a refused port."""

    def __init__(self) -> None:
        self.cancels = 0
        self.closed = False

    async def connect(self, **options: Any) -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                self.cancels += 1
                if self.cancels > 1:
                    raise
                continue  # as wait_for returning the OSError instead: taken for an outage, retried

    async def close(self) -> None:
        self.closed = True


async def test_a_connect_that_loses_a_cancel_still_ends_at_its_deadline() -> None:
    client = _LosesTheFirstCancel()
    first = _FirstConnect("nats://127.0.0.1:1", 0.2)
    with pytest.raises(BusUnavailable, match=r"^cannot connect to NATS at nats://127.0.0.1:1 within 0.2s"):
        await asyncio.wait_for(first.run(client, {}), 10)  # type: ignore[arg-type]
    assert client.cancels == 2
    assert client.closed and first.done
