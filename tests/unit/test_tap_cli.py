"""``gpubus tap`` and ``gpubus snapshot`` against bad arguments and a NATS without JetStream.

Cases: a subject NATS would refuse (whitespace, empty, ``>`` before the end, a wildcard inside a
token) and a malformed NATS URL (flag or GPUBUS_BUS_URL) are exit 2 before any connection;
a real nats-server without JetStream is one clear line naming what is missing, exit 1.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from natsproc import free_port, nats_server_binary, wait_until_serving

#: Nothing listens here: a command that connects instead of refusing its arguments fails the test.
UNREACHABLE = "nats://127.0.0.1:1"


async def gpubus(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", *args, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.fixture
def nats_without_jetstream(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    with (tmp_path / "nats.log").open("wb") as log:
        proc = subprocess.Popen([nats_server_binary(), "-a", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_serving(port, proc=proc)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(("subject", "says"), [
    ("foo bar", "whitespace in 'foo bar'"),
    ("", "empty token"),
    ("gpubus.>.x", "'>' must be the last token"),
    ("allocation..x", "empty token"),
    ("allocation.dec*ded", "a wildcard must be a whole token"),
])
async def test_a_bad_subject_is_exit_2_before_connecting(subject: str, says: str) -> None:
    code, err = await gpubus("tap", subject, "--nats", UNREACHABLE)
    assert code == 2, err
    [line] = err.splitlines()
    assert line.startswith(f"error: subject {subject!r}: ") and says in line, line


@pytest.mark.parametrize(("url", "says"), [
    ("nats://h:abc", "Port could not be cast to integer"),
    ("nats://127.0.0.1:99999", "Port out of range"),
    ("foo bar", "contains whitespace"),
    ("nats://", "names no host"),
    ("http://127.0.0.1:4222", "the scheme must be one of nats, tls, ws, wss"),
    ("nats://a:1,,nats://b:2", "empty server URL"),
])
async def test_a_malformed_nats_url_is_exit_2_before_connecting(url: str, says: str) -> None:
    code, err = await gpubus("tap", "--nats", url)
    assert code == 2, err
    [line] = err.splitlines()
    assert line.startswith("error: --nats: ") and says in line, line
    code, err = await gpubus("tap", env={"GPUBUS_BUS_URL": url})
    assert code == 2 and says in err, err
    code, err = await gpubus("snapshot", "--nats", url)
    assert code == 2 and "Invalid value for '--nats'" in err, err


async def test_a_nats_without_jetstream_is_named_in_one_line(nats_without_jetstream: str) -> None:
    says = "JetStream is not available on this NATS server (is it running with JetStream enabled?)"
    code, err = await gpubus("tap", "--nats", nats_without_jetstream, "--timeout", "10")
    assert code == 1
    # the error names where the URL came from (a flag, GPUBUS_BUS_URL, or the running stack's data dir)
    assert err.splitlines() == [f"error: subscribe gpubus.>: {says} (the URL from --nats)"], err
    code, err = await gpubus("snapshot", "--nats", nats_without_jetstream)
    assert code == 1
    assert err.splitlines() == [f"error: open bucket inventory: {says} (the URL from --nats)"], err
