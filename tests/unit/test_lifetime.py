"""The one way a service runs: owned tasks (``TaskSet``) and the run's lifetime (``run_service``).

Cases: close ends every task, even one whose first cancel was lost; a root task that raises or
returns is fatal to its owner, a cancelled one is not, a non-root task that raises is only logged;
``run_service``: SIGTERM cancels the run, its drain completes (a second signal does not cut it
short) and the process exits 0; a root task that dies stops the run, the drain runs, and it exits 1
naming the task; bad input exits 2; a cancel of the caller of ``run_until_stopped`` is not swallowed.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import typer

from shared.cli_options import run_service
from shared.errors import BadInput, TaskDied
from shared.lifetime import Lifetime, TaskSet, run_until_stopped


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


async def _boom() -> None:
    raise RuntimeError("broken")


async def _returns() -> None:
    return None


async def _ended(task: asyncio.Task[None]) -> None:
    await asyncio.wait([task])
    await asyncio.sleep(0)  # done callbacks run one loop step after the task ends


async def test_a_root_task_that_raises_or_returns_is_fatal_to_its_owner() -> None:
    fatal: list[BaseException] = []
    tasks = TaskSet("t", on_fatal=fatal.append)
    await _ended(tasks.spawn("boom", _boom(), root=True))
    await _ended(tasks.spawn("quits", _returns(), root=True))
    assert [str(e) for e in fatal] == ["task t:boom died: RuntimeError('broken')", "task t:quits ended"]
    assert all(isinstance(e, TaskDied) for e in fatal)
    assert isinstance(fatal[0].__cause__, RuntimeError)
    await tasks.close()


async def test_a_cancelled_root_task_and_a_failing_helper_task_are_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fatal: list[BaseException] = []
    tasks = TaskSet("t", on_fatal=fatal.append)
    helper = tasks.spawn("helper", _boom())
    root = tasks.spawn("root", asyncio.sleep(3600), root=True)
    await _ended(helper)
    root.cancel()
    await _ended(root)
    assert fatal == []
    assert "task t:helper died" in caplog.text and len(tasks) == 0


Run = Callable[[Lifetime], Coroutine[Any, Any, None]]


def _signal_after_start(log: list[str], *, twice: bool = False) -> Run:
    async def run(lifetime: Lifetime) -> None:
        log.append("started")
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            await lifetime.wait()
        finally:
            if twice:
                os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.01)  # a drain that awaits: a second cancel would cut it here
            log.append("drained")

    return run


def test_sigterm_drains_the_service_and_exits_zero() -> None:
    log: list[str] = []
    run_service("svc", _signal_after_start(log))
    assert log == ["started", "drained"]


def test_a_second_signal_does_not_cut_the_drain_short() -> None:
    log: list[str] = []
    run_service("svc", _signal_after_start(log, twice=True))
    assert log == ["started", "drained"]


def test_a_dying_root_task_stops_the_service_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    log: list[str] = []

    async def run(lifetime: Lifetime) -> None:
        tasks = TaskSet("svc", on_fatal=lifetime.fail)
        tasks.spawn("loop", _boom(), root=True)
        try:
            await lifetime.wait()
        finally:
            await tasks.close()
            log.append("drained")

    with pytest.raises(typer.Exit) as exit_:
        run_service("svc", run)
    assert exit_.value.exit_code == 1 and log == ["drained"]
    assert "svc: task svc:loop died: RuntimeError('broken')" in capsys.readouterr().err


def test_bad_input_at_start_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    async def run(lifetime: Lifetime) -> None:
        raise BadInput("setting x: no such file")

    with pytest.raises(typer.Exit) as exit_:
        run_service("svc", run)
    assert exit_.value.exit_code == 2
    assert "svc: setting x: no such file" in capsys.readouterr().err


async def test_a_cancel_of_the_caller_is_not_swallowed() -> None:
    started = asyncio.Event()

    async def run(lifetime: Lifetime) -> None:
        started.set()
        await lifetime.wait()

    caller = asyncio.create_task(run_until_stopped(run, signals=False))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller

