"""Owned background tasks: every task is named, kept, and cancelled and awaited on close.

A task that dies with an exception is logged loudly; a *root* task that dies also triggers
the owner's ``on_fatal`` so the service stops instead of limping (style: structured concurrency).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class TaskSet:
    """Tasks owned by one component."""

    def __init__(self, owner: str, on_fatal: Callable[[BaseException], None] | None = None) -> None:
        self._owner = owner
        self._on_fatal = on_fatal
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any], *, root: bool = False) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"{self._owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, root))
        return task

    def _done(self, task: asyncio.Task[Any], root: bool) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        log.error("task %s died", task.get_name(), exc_info=error)
        if root and self._on_fatal is not None:
            self._on_fatal(error)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel every task and wait for all of them to end.

        A cancel can be lost (Python 3.11's ``asyncio.wait_for`` drops one that races the result
        it awaited), so a task still running after a short wait is cancelled again
        (:func:`shared.tasks.cancel_and_wait`); a cancel of the caller is raised, not swallowed.
        """
        await cancel_and_wait(*self._tasks, log_errors=False)  # _done logged any error
