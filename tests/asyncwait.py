"""Waiting on conditions in async tests (never a bare sleep for an outcome)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def wait_until(condition: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0,  # noqa: ASYNC109
                     what: str = "condition") -> None:
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                result = condition()
                if not isinstance(result, bool):
                    result = await result
                if result:
                    return
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None
