"""Owned background tasks: close ends every task, even one whose first cancel was lost."""

from __future__ import annotations

import asyncio

from services.node_agent.background import TaskSet


async def test_close_cancels_again_a_task_that_swallowed_its_first_cancel() -> None:
    # What Python 3.11's asyncio.wait_for does when the cancel races the awaited result.
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.set()
        await asyncio.sleep(3600)

    tasks = TaskSet("t")
    task = tasks.spawn("stubborn", stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(tasks.close(), 10)
    assert swallowed.is_set()
    assert task.cancelled()
    assert len(tasks) == 0


async def test_a_root_task_that_dies_reports_to_its_owner() -> None:
    fatal: list[BaseException] = []

    async def boom() -> None:
        raise RuntimeError("broken")

    tasks = TaskSet("t", on_fatal=fatal.append)
    task = tasks.spawn("boom", boom(), root=True)
    await asyncio.wait([task])
    await asyncio.sleep(0)  # done callbacks run one loop step after the task ends
    assert [str(e) for e in fatal] == ["broken"]
    await tasks.close()
