"""``gpubus up`` refuses bad options before it starts anything: exit 2, the option named, no traceback.

Cases: every flag with a bound (--nodes, --split-count, --port-base, --nats-port, --nats-cluster,
--nats-replicas), a cluster that cannot start (with --nats, or past port 65535), the device
spec (parsed by the simulated nodes' own parser), --log-level, --nats; an empty --data-dir (which
meant the current directory, so ``--fresh`` deleted ``./nats``), a --data-dir that is a file, lies
under a file, cannot be made (/proc), or whose ``nats/`` or ``logs/`` is a file; replicas one server
cannot place (the stack starts, then stops at once with the setting named). "Nothing started"
means the data dir got no ``nats/`` store. The commands run as real processes; one that does not
exit in time is stopped and fails the test.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

#: Flags that keep a stack that did start small and off the default ports.
SMALL = ("--nodes", "1", "--devices", "1xA100-80GB", "--port-base", "0", "--nats-port", "0")


async def run_up(*args: str, cwd: Path, timeout: float = 45) -> tuple[int | None, str]:  # noqa: ASYNC109
    """Exit code (None if it was still running after ``timeout`` s and had to be stopped) and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "up", *args, cwd=cwd, env={**os.environ, "COLUMNS": "300"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.send_signal(signal.SIGTERM)
        out, _ = await proc.communicate()
        return None, out.decode()
    return proc.returncode, out.decode()


def one_line(text: str) -> str:
    """typer's error box as one line: frame characters dropped, wrapped lines joined."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--nodes", "0", "greater than or equal to 1"),
    ("--nodes", "-1", "greater than or equal to 1"),
    ("--nodes", "1000000", "less than or equal to 1000"),
    ("--split-count", "0", "greater than or equal to 1"),
    ("--split-count", "-3", "greater than or equal to 1"),
    ("--port-base", "-5", "greater than or equal to 0"),
    ("--port-base", "70000", "less than or equal to 65531"),
    ("--port-base", "65534", "less than or equal to 65531"),
    ("--nats-port", "-1", "greater than or equal to 0"),
    ("--nats-port", "99999", "less than or equal to 65535"),
    ("--devices", "", "empty device spec"),
    ("--devices", "0xA100-80GB", "count 0 outside 1..64"),
    ("--devices", "-1xA100-80GB", "cannot parse"),
    ("--devices", "99999xA100-80GB", "count 99999 outside 1..64"),
    ("--devices", "4xFOO", "unknown model 'FOO'"),
    ("--devices", "{garbage", "cannot parse"),
    ("--devices", "2x{name=X}", "needs name= and mem="),
    ("--log-level", "bogus", "'bogus' is not one of"),
    ("--nats", "nats://127.0.0.1:99999", "Port out of range"),
    ("--nats-cluster", "0", "greater than or equal to 1"),
    ("--nats-cluster", "6", "less than or equal to 5"),
    ("--nats-replicas", "0", "greater than or equal to 1"),
    ("--nats-replicas", "6", "less than or equal to 5"),
])
async def test_a_bad_option_is_refused_before_anything_starts(tmp_path: Path, flag: str, value: str,
                                                              says: str) -> None:
    code, out = await run_up(*SMALL, "--data-dir", str(tmp_path / "data"), f"{flag}={value}", cwd=tmp_path)
    assert code == 2, out
    assert f"Invalid value for '{flag}'" in one_line(out) and says in one_line(out), out
    assert "Traceback" not in out
    assert not (tmp_path / "data" / "nats").exists(), "the stack started"


@pytest.mark.parametrize(("args", "flag", "says"), [
    (("--nats-cluster", "3", "--nats", "nats://127.0.0.1:4222"), "--nats-cluster", "--nats uses yours"),
    (("--nats-cluster", "3", "--nats-port", "65534"), "--nats-port", "65534 leaves too few"),
])
async def test_a_cluster_that_cannot_be_started_is_a_bad_option(tmp_path: Path, args: tuple[str, ...],
                                                                 flag: str, says: str) -> None:
    code, out = await run_up(*SMALL, "--data-dir", str(tmp_path / "data"), *args, cwd=tmp_path)
    assert code == 2, out
    assert f"Invalid value for '{flag}'" in one_line(out) and says in one_line(out), out
    assert not (tmp_path / "data" / "nats").exists(), "the stack started"


async def test_replicas_one_server_cannot_place_stop_up_at_start_naming_the_setting(tmp_path: Path) -> None:
    code, out = await run_up(*SMALL, "--data-dir", str(tmp_path / "data"), "--nats-replicas", "3",
                             cwd=tmp_path, timeout=100)
    assert code == 1, out
    assert "bus setting replicas (GPUBUS_BUS_REPLICAS / --nats-replicas) is 3" in one_line(out), out
    assert "not part of a JetStream cluster" in one_line(out), out


async def test_an_empty_data_dir_is_refused_and_fresh_deletes_nothing_here(tmp_path: Path) -> None:
    (tmp_path / "nats").mkdir()
    (tmp_path / "nats" / "keep").write_text("someone's data")
    code, out = await run_up(*SMALL, "--data-dir", "", "--fresh", cwd=tmp_path)
    assert code == 2, out
    assert "Invalid value for '--data-dir'" in one_line(out) and "must not be empty" in one_line(out), out
    assert (tmp_path / "nats" / "keep").read_text() == "someone's data"


@pytest.mark.parametrize("data_dir", ["a-file", "a-file/sub"])
async def test_a_data_dir_that_cannot_be_a_directory_is_a_bad_option(tmp_path: Path, data_dir: str) -> None:
    (tmp_path / "a-file").write_text("x")
    code, out = await run_up(*SMALL, "--data-dir", str(tmp_path / data_dir), cwd=tmp_path)
    assert code == 2, out
    assert f"Invalid value for '--data-dir': {tmp_path / 'a-file'} is not a directory" in one_line(out), out
    assert "Traceback" not in out


@pytest.mark.parametrize("blocked", ["nats", "logs", "run", "tls"])
async def test_a_data_dir_whose_part_is_a_file_is_named_in_one_line(tmp_path: Path, blocked: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / blocked).write_text("not a directory")
    code, out = await run_up(*SMALL, "--data-dir", str(data), cwd=tmp_path)
    assert code == 2, out
    assert f"gpubus up: --data-dir {data}: cannot make {data / blocked}: File exists" in out, out
    assert "Traceback" not in out and "stopped" not in out


async def test_a_data_dir_that_cannot_be_made_is_named_in_one_line(tmp_path: Path) -> None:
    code, out = await run_up(*SMALL, "--data-dir", "/proc/gpubus-x", cwd=tmp_path)
    assert code == 2, out
    assert "gpubus up: --data-dir /proc/gpubus-x: cannot make /proc/gpubus-x" in out, out
    assert "Traceback" not in out
