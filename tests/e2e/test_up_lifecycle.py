"""``gpubus up``'s life: one stack per data dir, hints that paste, nothing left behind however it stops.

Cases: a second ``up`` (even with ``--fresh``) on a live data dir is refused naming the dir and the
holder's pid, and the live store survives; the printed ``try:`` commands quote a data dir with a
space, so they run as pasted; SIGHUP (a closed terminal) stops every child and nats-server like
Ctrl-C; a start cancelled while nats-server is still coming up leaves no server behind; Ctrl-C
while the simulated nodes are starting stops them at once (not after they all came up, or a kill)
and removes their scratch dir. "Nothing
left" means no process whose command line names the data dir, checked once ``up`` (or the stack)
has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from asyncwait import wait_until

from gpubus_local.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SMALL = ("--nodes", "1", "--devices", "1xA100-80GB", "--port-base", "0", "--nats-port", "0")


def processes_naming(path: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``path`` (our stack's children and server)."""
    needle = str(path).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def kill_all(pids: list[int]) -> None:
    """Clean up after a failing test: these are processes the test itself caused to start."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Up:
    proc: asyncio.subprocess.Process
    data_dir: Path
    text: str


async def start_up(data_dir: Path, *args: str) -> Up:
    """``gpubus up`` as a process, returned once it printed its endpoints and hints."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "up", *SMALL, "--data-dir", str(data_dir), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen: list[str] = []
    async with asyncio.timeout(120):
        while not any("Ctrl-C stops everything" in line for line in seen):
            line = (await proc.stdout.readline()).decode()
            assert line, "gpubus up ended early:\n" + "".join(seen)
            seen.append(line)
    return Up(proc, data_dir, "".join(seen))


async def stop_up(up: Up, sig: signal.Signals = signal.SIGINT) -> tuple[int | None, str]:
    if up.proc.returncode is None:
        up.proc.send_signal(sig)
    rest, _ = await asyncio.wait_for(up.proc.communicate(), 60)
    return up.proc.returncode, rest.decode()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Up]:
    """One ``up`` whose data dir has a space in its path."""
    data_dir = tmp_path_factory.mktemp("up") / "my data"
    up = await start_up(data_dir)
    try:
        yield up
    finally:
        await stop_up(up)
        kill_all(processes_naming(data_dir))


async def test_a_second_up_on_a_live_data_dir_is_refused_naming_the_holder(running: Up) -> None:
    store = running.data_dir / "nats" / "jetstream"
    assert store.is_dir()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "up", *SMALL, "--data-dir", str(running.data_dir), "--fresh",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode()
    assert proc.returncode == 1, text
    assert (f"--data-dir {running.data_dir} is in use by another `gpubus up` (pid {running.proc.pid})"
            in text), text
    assert "Traceback" not in text
    assert store.is_dir(), "--fresh deleted the live store"
    assert running.proc.returncode is None


async def test_the_printed_commands_quote_a_data_dir_with_a_space(running: Up) -> None:
    lines = running.text.split("try:\n", 1)[1].splitlines()
    commands = [shlex.split(line) for line in lines if line.startswith("  ")]
    kubeconfigs = [argv[argv.index("--kubeconfig") + 1] for argv in commands if "--kubeconfig" in argv]
    assert kubeconfigs == [str(running.data_dir / "kubeconfig")] * 3, running.text  # submit, get, kubectl
    data_dirs = [argv[argv.index("--data-dir") + 1] for argv in commands if "--data-dir" in argv]
    assert data_dirs == [str(running.data_dir)] * 2, running.text  # tap, snapshot


async def test_sighup_stops_every_child_and_nats_server(tmp_path: Path) -> None:
    up = await start_up(tmp_path / "data")
    assert processes_naming(up.data_dir)
    try:
        code, rest = await stop_up(up, signal.SIGHUP)
        left = processes_naming(up.data_dir)
        assert left == [], f"left running: {left}"
        assert code == 0 and "stopped" in rest, rest
    finally:
        kill_all(processes_naming(up.data_dir))


def test_a_start_cancelled_while_nats_is_starting_leaves_no_server(tmp_path: Path) -> None:
    """Its own event loop, closed at the end, so every thread the stack started has finished."""
    async def cancel_while_nats_starts() -> None:
        stack = Stack(StackSpec(data_dir=tmp_path, nodes=1, devices="1xA100-80GB", nats_port=0, port_base=0))
        starting = asyncio.create_task(stack.start())
        while stack.nats is None and not starting.done():  # noqa: ASYNC110 - set just before the thread
            await asyncio.sleep(0)  # one loop step: let start() run up to that thread
        assert not starting.done(), starting.exception()  # a start that failed first tests nothing
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await stack.stop()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cancel_while_nats_starts())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
    left = processes_naming(tmp_path / "nats")
    kill_all(left)
    assert left == [], "nats-server left running"


async def test_ctrl_c_while_the_nodes_start_stops_them_and_removes_their_scratch(tmp_path: Path) -> None:
    data_dir, scratch = tmp_path / "data", "simulated hosts' files in "
    nodes_log = data_dir / "logs" / "nodes.log"
    proc = await asyncio.create_subprocess_exec(
        # 300 nodes take seconds to start on 2 cores: a wide window for the Ctrl-C to land in
        sys.executable, "-m", "gpubus", "up", "--nodes", "300", "--devices", "1xA100-80GB",
        "--port-base", "0", "--nats-port", "0", "--data-dir", str(data_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        await wait_until(lambda: nodes_log.exists() and scratch in nodes_log.read_text(), 120,
                         "the nodes process to make its scratch dir")
        proc.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        log = nodes_log.read_text()
        assert "simulated nodes up" not in log, "the nodes finished starting before they stopped"
        assert "killing it" not in out.decode(), out.decode()
        scratch_dir = log.split(scratch, 1)[1].split()[0]
        assert not os.path.exists(scratch_dir), "scratch dir left behind"  # noqa: ASYNC240 - one stat
        assert processes_naming(data_dir) == []
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        kill_all(processes_naming(data_dir))
