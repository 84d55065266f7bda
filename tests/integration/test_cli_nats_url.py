"""``gpubus tap`` and ``gpubus snapshot`` reach the NATS a user means without ``--nats``, as processes
against a real nats-server on a port that is not the default.

Cases: the URL a running ``gpubus up`` recorded in its data dir (``--data-dir``); ``GPUBUS_BUS_URL``,
which wins over the record; ``--nats``, which wins over both; a stale record is a one-line error
whose last line names the file it came from, not a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from gpubus.up_dir import NATS_URL_FILE, write_nats_url
from shared.bus import Bus
from shared.events import AllocationReleased

ROOT = Path(__file__).resolve().parents[2]
DEAD = "nats://127.0.0.1:1"


async def gpubus(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUBUS_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", *args, cwd=ROOT, env={**clean, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
def data_dir(tmp_path: Path, nats_url: str) -> Path:
    assert not nats_url.endswith(":4222"), "the session's server must not be on the default port"
    write_nats_url(tmp_path, nats_url)
    return tmp_path


async def published(bus: Bus) -> AllocationReleased:
    event = AllocationReleased(pod_uid=uuid.uuid4().hex, namespace="ns", name="p", why="deleted",
                               node=f"n-{uuid.uuid4().hex[:8]}")  # its own node: --node finds it alone
    await bus.publish(event)
    return event


async def test_tap_and_snapshot_use_the_url_the_running_stack_recorded(bus: Bus, data_dir: Path) -> None:
    await published(bus)
    code, out, err = await gpubus("tap", "--data-dir", str(data_dir), "--all", "--count", "1",
                                  "--timeout", "30")
    assert code == 0, err
    assert len(out.splitlines()) == 1, out
    code, out, err = await gpubus("snapshot", "--data-dir", str(data_dir))
    assert code == 0, err
    assert "nodes" in json.loads(out)


async def test_gpubus_bus_url_wins_over_the_record_and_the_flag_over_both(
        bus: Bus, tmp_path: Path, nats_url: str) -> None:
    event = await published(bus)
    write_nats_url(tmp_path, DEAD)
    code, out, err = await gpubus("tap", "--data-dir", str(tmp_path), "--all", "--json", "--node", event.node,
                                  "--count", "1", "--timeout", "30", env={"GPUBUS_BUS_URL": nats_url})
    assert code == 0, err
    assert json.loads(out)["id"] == event.id, out
    code, _, err = await gpubus("snapshot", "--data-dir", str(tmp_path), "--nats", nats_url,
                                env={"GPUBUS_BUS_URL": DEAD})
    assert code == 0, err


@pytest.mark.parametrize("command", ["tap", "snapshot"])
async def test_a_stale_record_is_an_error_naming_its_file(tmp_path: Path, command: str) -> None:
    write_nats_url(tmp_path, DEAD)
    code, _, err = await gpubus(command, "--data-dir", str(tmp_path))
    assert code == 1, err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: cannot connect to NATS"), err
    assert f"the running `gpubus up` ({tmp_path / NATS_URL_FILE})" in line, err
