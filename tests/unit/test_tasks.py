"""cancel_and_wait: ends the tasks it is given, and never swallows the caller's own cancel.

Every wait here is bounded (:data:`BOUND_S`) and followed by an assertion that names what did not
happen, so a broken ``cancel_and_wait`` fails its test at once instead of hanging the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from shared.tasks import cancel_and_wait, cancel_and_wait_through

#: Seconds any step here may take; each takes milliseconds when cancel_and_wait works.
BOUND_S = 5.0


async def _ended(task: asyncio.Future[Any], what: str) -> None:
    """Wait (bounded) for ``task`` to end; fail naming ``what`` if it does not."""
    done, _ = await asyncio.wait([task], timeout=BOUND_S)
    assert done, f"{what} did not end within {BOUND_S} s"


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
    await _ended(asyncio.ensure_future(ending.wait()), "the child's cancel")  # the caller now waits for it
    caller.cancel()
    await _ended(caller, "the cancelled caller")
    await _ended(child, "the child")
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
    await _ended(child, "the child")


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
        stopping = asyncio.create_task(cancel_and_wait(failing, None, sleeping, finished))
        await _ended(stopping, "cancel_and_wait")
    assert failing.done() and sleeping.cancelled() and finished.done()
    assert "failing" in caplog.text and "boom" in caplog.text


async def test_skips_the_current_task() -> None:
    async def ends_itself() -> str:
        await cancel_and_wait(asyncio.current_task())
        return "returned"

    task = asyncio.create_task(ends_itself())  # the current task in there is this one
    await _ended(task, "cancel_and_wait(its own task)")
    assert not task.cancelled(), "cancel_and_wait cancelled the task that called it"
    assert task.result() == "returned"


async def test_a_clean_up_cancelled_again_still_ends_its_tasks() -> None:
    """An owner cancels a task whose ``finally`` is ending tasks of its own, then cancels it again
    (cancel_and_wait does so after RECANCEL_S): those tasks still end, and the cancel is raised."""
    release = asyncio.Event()
    cleaning = asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await asyncio.Future()
        finally:
            cleaning.set()
            await release.wait()  # ends once released (or cancelled again by cancel_and_wait)

    inner = asyncio.create_task(slow_to_end(), name="inner")

    async def owner() -> None:
        try:
            await asyncio.Future()
        finally:
            await cancel_and_wait_through(inner)

    outer = asyncio.create_task(owner(), name="owner")
    await asyncio.sleep(0)  # let both start waiting
    outer.cancel()
    await asyncio.wait_for(cleaning.wait(), 5.0)
    outer.cancel()  # the owner's second cancel, while the clean-up runs
    await asyncio.sleep(0)
    assert not inner.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(outer, 5.0)
    assert inner.done()
