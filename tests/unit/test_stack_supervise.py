"""The supervisor's pure backoff and its restart loop, on stand-in processes (no subprocess).

Case matrix: delays double from the initial one up to the cap; the limit-th restart within the
window is refused (a crash loop); a process that stayed up past the window starts afresh; a part
that dies once is restarted and reported (died, then back); a part that always dies ends the run
with CrashLoop naming it, after ``limit`` restarts; a restart that fails counts as a death.
"""

from __future__ import annotations

import asyncio

import pytest

from gpubus_local.stack_supervise import Backoff, CrashLoop, RestartPolicy, Supervised, Supervisor

FAST = RestartPolicy(initial_s=0.001, max_s=0.004, limit=3, window_s=60.0)


def test_delays_double_up_to_the_cap_then_a_crash_loop_is_called() -> None:
    backoff = Backoff(RestartPolicy(initial_s=0.5, max_s=1.5, limit=4, window_s=60.0))
    assert [backoff.next_delay(t) for t in (0.0, 1.0, 2.0, 3.0)] == [0.5, 1.0, 1.5, 1.5]
    assert backoff.next_delay(4.0) is None


def test_a_process_that_stayed_up_past_the_window_starts_afresh() -> None:
    backoff = Backoff(RestartPolicy(initial_s=0.5, max_s=10.0, limit=2, window_s=60.0))
    assert backoff.next_delay(0.0) == 0.5 and backoff.next_delay(1.0) == 1.0
    assert backoff.next_delay(200.0) == 0.5


class Flaky:
    """A process stand-in: dies ``deaths`` times (or forever), each restart starts it again."""

    def __init__(self, name: str, deaths: int | None, *, failing_restarts: int = 0) -> None:
        self.name, self.deaths, self.failing_restarts = name, deaths, failing_restarts
        self.started = 0

    async def wait_exit(self) -> int:
        if self.deaths is None or self.started < self.deaths:
            return 137
        await asyncio.Event().wait()  # stays up
        raise AssertionError

    async def restart(self) -> None:
        if self.failing_restarts:
            self.failing_restarts -= 1
            raise RuntimeError("exited while starting")
        self.started += 1

    def part(self) -> Supervised:
        return Supervised(name=self.name, wait_exit=self.wait_exit, restart=self.restart)


async def test_a_part_that_dies_once_is_restarted_and_reported() -> None:
    lines: list[str] = []
    back = asyncio.Event()

    def report(line: str) -> None:
        lines.append(line)
        if line.endswith("is back"):
            back.set()

    once, steady = Flaky("scheduler", 1), Flaky("webhook", 0)
    supervisor = Supervisor([once.part(), steady.part()], report=report, policy=FAST)
    run = asyncio.create_task(supervisor.run())
    try:
        await asyncio.wait_for(back.wait(), 5)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    assert lines == ["scheduler died (exit code 137); restarting in 0.0s", "scheduler is back"]
    assert supervisor.restarts == {"scheduler": 1, "webhook": 0}


async def test_a_part_that_keeps_dying_ends_the_run_as_a_crash_loop() -> None:
    lines: list[str] = []
    dying = Flaky("nodes", None, failing_restarts=1)
    supervisor = Supervisor([dying.part()], report=lines.append, policy=FAST)
    with pytest.raises(CrashLoop) as caught:
        await asyncio.wait_for(supervisor.run(), 5)
    assert caught.value.name == "nodes"
    assert lines[-1] == "nodes died (exit code 137) and keeps dying: giving up"
    assert supervisor.restarts["nodes"] == FAST.limit - 1  # the failed start counted as a death
