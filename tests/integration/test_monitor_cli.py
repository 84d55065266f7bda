"""``gpubus monitor`` as an operator runs it: the real CLI in a subprocess, real NATS, real /metrics.

Cases: a decision published on the bus shows up as a usage event and in /metrics, and SIGTERM
stops the process cleanly; a bad source name is a one-line error with exit code 2; settings
fall back to HAMi's NODE_NAME/HOOK_PATH.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path

import aiohttp
import pytest
from asyncwait import wait_until
from natsproc import free_port

from services.monitor import settings as monitor_settings
from shared.bus import Bus
from shared.config import SettingsError
from shared.events import AllocationDecided, Event, Usage
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

ROOT = Path(__file__).resolve().parents[2]
GPU = "GPU-11111111-2222-3333-4444-555555555555"


async def metrics_text(port: int) -> str | None:
    try:
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            return await resp.text()
    except aiohttp.ClientError:
        return None


async def test_monitor_command_publishes_usage_and_serves_metrics(bus: Bus, nats_url: str) -> None:
    node = f"cli-{uuid.uuid4().hex[:6]}"
    port = free_port()
    got: list[Event] = []

    async def on_usage(event: Event) -> None:
        got.append(event)

    await bus.subscribe(f"gpubus.usage.sample.{node}", on_usage)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpubus",
        "monitor",
        "--node",
        node,
        "--source",
        "sim",
        "--nats",
        nats_url,
        "--metrics-bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--interval",
        "0.2",
        "--publish-interval",
        "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        texts: list[str] = []

        async def serving() -> bool:
            text = await metrics_text(port)
            if text is not None:
                texts.append(text)
            return text is not None

        await wait_until(serving, timeout=60, what="/metrics to answer")  # a loaded machine starts it slowly
        pod = Allocation(
            pod_uid=PodUID(str(uuid.uuid4())),
            namespace="ml",
            name="bert",
            node=NodeName(node),
            containers=("main",),
            state=AllocationState.APPLIED,
            devices=((ContainerDevice(uuid=DeviceUUID(GPU), usedmem=4000, usedcores=25),),),
        )
        await bus.publish(AllocationDecided(allocation=pod, node=node))
        await wait_until(
            lambda: any(isinstance(e, Usage) and e.containers for e in got),
            timeout=20,
            what="a usage event with the pod",
        )
        usage = next(e for e in got if isinstance(e, Usage) and e.containers)
        assert isinstance(usage, Usage)
        assert usage.source == "monitor" and usage.containers[0].pod == "bert"
        assert usage.containers[0].devices[0].limit_bytes == 4000 << 20
        text = await metrics_text(port)
        assert text is not None and 'hami_vgpu_memory_limit_bytes{container="main"' in text
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert proc.returncode == 0, err.decode()[-2000:]


async def test_unknown_source_is_a_one_line_error() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpubus",
        "monitor",
        "--node",
        "n",
        "--source",
        "dcgm",
        "--nats",
        "none",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "unknown usage source" in err.decode() and "dcgm" in err.decode()


def test_settings_fall_back_to_hamis_node_name_and_hook_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    monkeypatch.setenv("HOOK_PATH", "/opt/vgpu")
    monkeypatch.delenv("GPUBUS_MONITOR_NODES", raising=False)
    monkeypatch.delenv("GPUBUS_MONITOR_HOOK_PATH", raising=False)
    s = monitor_settings.load({})
    assert (s.nodes, s.hook_path, s.metrics_port) == (("gpu-7",), "/opt/vgpu", 9394)
    monkeypatch.setenv("GPUBUS_MONITOR_NODES", "a,b")
    assert monitor_settings.load({}).nodes == ("a", "b")


def test_settings_without_a_node_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("GPUBUS_MONITOR_NODES", raising=False)
    with pytest.raises(SettingsError, match="no node"):
        monitor_settings.load({})
