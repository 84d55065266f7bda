"""A service's owned tasks and its lifetime: every gpubus service runs and stops the same way.

:class:`TaskSet` owns named background tasks: each is kept, logged loudly if it raises, and
cancelled and awaited on :meth:`TaskSet.close`. A *root* task is one its owner cannot run without:
if it ends on its own, returning or raising, the set reports a :class:`~shared.errors.TaskDied` to
``on_fatal`` (style rule 10: the service stops loudly instead of limping).

:class:`Lifetime` is what a service's ``run`` is given by :func:`run_until_stopped` (which
:func:`shared.cli_options.run_service` calls): the run is cancelled on SIGTERM/SIGINT (its
``finally`` drains; exit 0) or on the first fatal error (drains too, then :func:`run_until_stopped`
raises the :class:`~shared.errors.TaskDied`; exit 1). A run awaits :meth:`Lifetime.wait` once it is
up; a stop requested while it is still starting cancels the start.

Must not know any service, the bus or the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from shared.errors import TaskDied
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: ``on_fatal(error)``: a root task ended; the owner (usually :meth:`Lifetime.fail`) stops the service.
FatalCallback = Callable[[BaseException], None]


class TaskSet:
    """Tasks owned by one component, named ``<owner>:<name>``."""

    def __init__(self, owner: str, on_fatal: FatalCallback | None = None) -> None:
        self._owner = owner
        self._on_fatal = on_fatal
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any], *, root: bool = False) -> asyncio.Task[Any]:
        """Start ``coro`` as an owned task; ``root``: its ending on its own is fatal."""
        task = asyncio.create_task(coro, name=f"{self._owner}:{name}")
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, root))
        return task

    def _done(self, task: asyncio.Task[Any], root: bool) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("task %s died", task.get_name(), exc_info=error)
        if not root:
            return
        if error is None:
            log.error("task %s ended; its owner cannot run without it", task.get_name())
        died = TaskDied(f"task {task.get_name()} {'ended' if error is None else f'died: {error!r}'}")
        died.__cause__ = error
        if self._on_fatal is not None:
            self._on_fatal(died)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Cancel every task and wait for all of them to end (a lost cancel is sent again, see
        :func:`shared.tasks.cancel_and_wait`); a cancel of the caller is raised, not swallowed."""
        await cancel_and_wait(*self._tasks, log_errors=False)  # _done logged any error


class Lifetime:
    """Why and when one service run stops: :meth:`stop` (a signal) or :meth:`fail` (a fatal error)."""

    def __init__(self) -> None:
        self.error: TaskDied | None = None
        """The first fatal error; None while healthy or after a plain stop."""
        self._run: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """End the run: cancel it once (a second signal does not cut its drain short)."""
        if self._stopping:
            return
        self._stopping = True
        if self._run is not None:
            self._run.cancel()

    def fail(self, error: BaseException) -> None:
        """A root task ended: remember the first such error and stop."""
        if self.error is None:
            self.error = error if isinstance(error, TaskDied) else TaskDied(f"stopped: {error!r}")
            if self.error is not error:
                self.error.__cause__ = error
        self.stop()

    async def wait(self) -> None:
        """Block until the run is stopped (it is cancelled out of here)."""
        await asyncio.Future()


async def run_until_stopped(
    run: Callable[[Lifetime], Coroutine[Any, Any, None]], *, signals: bool = True
) -> None:
    """Run ``run(lifetime)`` until it returns or is stopped; raise its fatal error, if any.

    ``signals``: SIGTERM and SIGINT stop it (where the loop supports signal handlers).
    """
    lifetime = Lifetime()
    task = lifetime._run = asyncio.ensure_future(run(lifetime))
    if signals:
        _on_stop_signals(lifetime.stop)
    try:
        await task
    except asyncio.CancelledError:
        if not lifetime.stopping or _cancelling(asyncio.current_task()):
            raise  # the caller was cancelled, not the run stopped
    finally:
        if signals:
            _remove_stop_signals()
    if lifetime.error is not None:
        raise lifetime.error


def _cancelling(task: asyncio.Task[Any] | None) -> bool:
    return task is not None and task.cancelling() > 0


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _on_stop_signals(stop: Callable[[], object]) -> None:
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop)


def _remove_stop_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError):
            loop.remove_signal_handler(sig)
