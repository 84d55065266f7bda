"""Cancelling owned tasks without swallowing the caller's own cancellation.

``task.cancel(); with suppress(CancelledError): await task`` cannot tell the task's
cancellation from the caller's: a cancel aimed at the caller while it waits is swallowed, so
``asyncio.wait_for(stop(), t)`` or a service shutdown goes on past its deadline.
:func:`cancel_and_wait` waits with :func:`asyncio.wait`, which never raises for the tasks it
waits on, so a ``CancelledError`` out of it is the caller's and is re-raised.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

#: A task not ended this long after its cancel is cancelled again, seconds.
RECANCEL_S = 0.5
#: Every this many re-cancels, the tasks still running are named in a warning.
_WARN_EVERY = 20


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None, log_errors: bool = True) -> None:
    """Cancel ``tasks`` and wait until every one has ended.

    ``None`` entries and the current task are skipped (a task cannot wait for itself). A cancel
    can be lost (Python 3.11's ``asyncio.wait_for`` drops one that races the result it awaited),
    so a task still running after :data:`RECANCEL_S` is cancelled again. An exception a task ended
    with is logged (``log_errors``) and otherwise dropped; its cancellation is not an error. If the
    *caller* is cancelled meanwhile, ``CancelledError`` is raised (the tasks stay cancelled).
    """
    current = asyncio.current_task()
    owned = [t for t in dict.fromkeys(tasks) if t is not None and t is not current]
    pending = set(owned)
    rounds = 0
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
        rounds += 1
        if pending and rounds % _WARN_EVERY == 0:
            names = sorted(_name(t) for t in pending)
            log.warning("%d tasks still ending after cancel: %s", len(pending), names)
    for task in owned:
        if task.cancelled():
            continue
        error = task.exception()  # also marks it retrieved, so asyncio does not log it at GC
        if error is not None and log_errors:
            log.warning("task %s ended with an error", _name(task), exc_info=error)


async def cancel_and_wait_through(*tasks: asyncio.Future[Any] | None) -> None:
    """:func:`cancel_and_wait`, finished even when the caller is cancelled meanwhile (a clean-up in
    a ``finally``): the tasks always end before this returns, and the caller's cancel is raised
    after. Without it an owner's re-cancel (:data:`RECANCEL_S`) cut the clean-up short and left
    the tasks running."""
    cleanup = asyncio.ensure_future(cancel_and_wait(*tasks, log_errors=False))
    cancelled = False
    while not cleanup.done():
        try:
            await asyncio.shield(cleanup)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    cleanup.result()


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)
