"""``gpubus up`` supervises its children: what dies is restarted with backoff and said so; the
stack keeps serving; only Ctrl-C (or a crash loop, tests/unit/test_stack_supervise.py) stops it.

Case matrix: the real ``gpubus up`` with the scheduler SIGKILLed: it prints that the scheduler
died and came back, a pod is then scheduled, Ctrl-C still stops everything with exit code 0; a
3-server NATS cluster stack under the supervisor with one nats-server SIGKILLed: the server comes
back as the same peer, the other children never restart, pods are scheduled after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod, running_stack

from gpubus_local.stack_supervise import Supervisor, stack_parts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def _line(proc: asyncio.subprocess.Process, seen: list[str], wanted: str) -> str:
    assert proc.stdout is not None
    while True:
        line = (await proc.stdout.readline()).decode()
        assert line, "gpubus up ended early:\n" + "".join(seen)
        seen.append(line)
        if wanted in line:
            return line


async def test_gpubus_up_restarts_a_killed_scheduler_and_keeps_running(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "up", "--nodes", "1", "--devices", "1xA100-80GB", "--nats-port", "0",
        "--port-base", "0", "--data-dir", str(tmp_path), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    seen: list[str] = []
    try:
        async with asyncio.timeout(120):
            ready = await _line(proc, seen, "scheduler ready (pid ")
            await _line(proc, seen, "Ctrl-C stops everything")
            os.kill(int(ready.split(" ready (pid ")[1].split(")")[0]), signal.SIGKILL)
            died = await _line(proc, seen, "scheduler died")
            assert "restarting in" in died, died
            await _line(proc, seen, "scheduler is back")
        assert proc.returncode is None, "".join(seen)
        proc.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, "".join(seen) + rest.decode()
        assert "stopped" in rest.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest_asyncio.fixture
async def e2e(tmp_path: Path) -> AsyncIterator[E2E]:
    async with running_stack(tmp_path / "stack", nodes=2, devices="2xA100-80GB",
                             configure=lambda s: dataclasses.replace(s, nats_cluster=3)) as handle:
        yield handle


async def test_one_nats_server_of_three_lost_leaves_the_stack_running(e2e: E2E) -> None:
    lines: list[str] = []
    supervisor = Supervisor(stack_parts(e2e.stack), report=lines.append)
    running = asyncio.create_task(supervisor.run(), name="supervise")
    try:
        await e2e.create(gpu_pod("before"))
        await e2e.wait_phase(["before"], {"Running"}, timeout=60)
        victim = "nats-2"
        pid = e2e.stack.nats_cluster.servers[victim].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await wait_until(lambda: supervisor.restarts[victim] == 1, 60, what=f"{victim} back")
        assert e2e.stack.nats_cluster.servers[victim].running
        await e2e.create(gpu_pod("after"))
        await e2e.wait_phase(["after"], {"Running"}, timeout=60)
        assert not running.done()
        assert {name: n for name, n in supervisor.restarts.items() if n} == {victim: 1}
        assert f"{victim} is back" in lines
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    await e2e.check_invariants()
