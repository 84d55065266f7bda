"""``gpubus node-agent`` as a process: flags -> settings -> a running agent with /metrics, clean SIGTERM."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import aiohttp
import pynvml
import pytest
from natsproc import free_port

from services.sim.kubelet import SimKubelet


async def test_cli_runs_an_agent_that_registers_serves_metrics_and_stops_on_sigterm(nats_url: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="na-cli-", dir="/tmp"))
    kubelet = SimKubelet(tmp / "dp", tmp / "pr.sock")
    await kubelet.start()
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpubus",
        "node-agent",
        "--node-name",
        "cli-node",
        "--simulate",
        "2xT4",
        "--plugin-dir",
        str(tmp / "dp"),
        "--pod-resources-socket",
        str(tmp / "pr.sock"),
        "--hook-path",
        str(tmp / "hook"),
        "--metrics-port",
        str(port),
        "--nats-url",
        nats_url,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await kubelet.wait_for(lambda: len(kubelet.devices()) == 20, timeout=30)
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            body = await resp.text()
        assert 'gpubus_node_agent_registrations_total{result="ok"} 1.0' in body
        assert 'gpubus_node_agent_devices{health="healthy"} 2.0' in body
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def test_cli_without_gpus_or_simulation_exits_with_a_clear_message(nats_url: str) -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpubus",
        "node-agent",
        "--node-name",
        "no-gpu",
        "--nats-url",
        nats_url,
        "--metrics-port",
        "0",
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert b"NVML is not usable on this node" in err and b"--simulate" in err
