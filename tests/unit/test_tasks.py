"""cancel_and_wait: ends the tasks it is given, and never swallows the caller's own cancel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from shared.tasks import cancel_and_wait


async def _slow_to_end(ending: asyncio.Event) -> None:
    """A child that takes a while to end once cancelled (a cleanup with an await in it)."""
    try:
        await asyncio.sleep(3600)
    finally:
        ending.set()
        await asyncio.sleep(0.3)


async def _old_pattern(child: asyncio.Task[None]) -> None:
    child.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await child


Stop = Callable[[asyncio.Task[None]], Coroutine[Any, Any, None]]


async def _cancel_while_waiting(stop: Stop) -> asyncio.Task[None]:
    ending = asyncio.Event()
    child = asyncio.create_task(_slow_to_end(ending))
    await asyncio.sleep(0)
    caller = asyncio.create_task(stop(child))
    await ending.wait()  # the caller is now waiting for the child to end
    caller.cancel()
    await asyncio.wait([caller], timeout=5)
    await asyncio.wait([child], timeout=5)
    return caller


async def test_the_callers_cancel_is_raised() -> None:
    caller = await _cancel_while_waiting(cancel_and_wait)
    assert caller.cancelled()


async def test_the_old_pattern_swallowed_the_callers_cancel() -> None:
    caller = await _cancel_while_waiting(_old_pattern)
    assert not caller.cancelled()  # why cancel_and_wait exists


async def test_wait_for_times_out_on_time() -> None:
    ending = asyncio.Event()
    child = asyncio.create_task(_slow_to_end(ending))
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(cancel_and_wait(child), 0.01)
    await asyncio.wait([child], timeout=5)


async def test_ends_every_task_and_logs_errors(caplog: pytest.LogCaptureFixture) -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("boom") from None

    async def done_already() -> None:
        return None

    failing = asyncio.create_task(fails_on_cancel(), name="failing")
    sleeping = asyncio.create_task(asyncio.sleep(3600))
    finished = asyncio.create_task(done_already())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="shared.tasks"):
        await cancel_and_wait(failing, None, sleeping, finished)
    assert failing.done() and sleeping.cancelled() and finished.done()
    assert "failing" in caplog.text and "boom" in caplog.text


async def test_skips_the_current_task() -> None:
    await cancel_and_wait(asyncio.current_task())  # no wait_for: that would run it in another task
