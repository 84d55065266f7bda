"""``gpubus node-agent`` as a process: flags -> settings -> a running agent with /metrics, clean SIGTERM.

Also the shared NATS flags: ``--nats-tls-ca`` reaches a NATS that demands TLS, and ``--nats-creds`` /
``--nats-tls-ca`` naming a missing file stop the agent with the bus setting named.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import nats
import pynvml
import pytest
import trustme
from asyncwait import wait_until
from natsproc import NatsServerProcess, free_port

from gpubus_local.sim.kubelet import SimKubelet


async def node_agent(*args: str) -> asyncio.subprocess.Process:
    """``gpubus node-agent`` with these flags, its stderr piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "node-agent", *args, stderr=asyncio.subprocess.PIPE
    )


@contextlib.asynccontextmanager
async def agent_on_a_kubelet(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, SimKubelet]]:
    """A simulated 2xT4 agent (flags ``args`` added) on a kubelet stand-in, in a short temp dir
    (unix socket paths are limited); killed if it still runs at the end."""
    tmp = Path(tempfile.mkdtemp(prefix="na-cli-", dir="/tmp"))
    kubelet = SimKubelet(tmp / "dp", tmp / "pr.sock")
    await kubelet.start()
    proc = await node_agent(
        "--simulate", "2xT4", "--plugin-dir", str(tmp / "dp"), "--pod-resources-socket", str(tmp / "pr.sock"),
        "--hook-path", str(tmp / "hook"), *args,
    )
    try:
        yield proc, kubelet
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await kubelet.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def test_cli_runs_an_agent_that_registers_serves_metrics_and_stops_on_sigterm(nats_url: str) -> None:
    port = free_port()
    args = ("--node-name", "cli-node", "--metrics-port", str(port), "--nats-url", nats_url)
    async with agent_on_a_kubelet(*args) as (proc, kubelet):
        await kubelet.wait_for(lambda: len(kubelet.devices()) == 20, timeout=30)

        async def metrics() -> str:
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                return await resp.text()

        # The kubelet may list the devices before the agent has read its Register's answer: the
        # registration is counted then, not necessarily by the time the devices are seen.
        async def registered() -> bool:
            return 'gpubus_node_agent_registrations_total{result="ok"} 1.0' in await metrics()

        await wait_until(registered, what="the registration counted")
        body = await metrics()
        assert 'gpubus_node_agent_devices{health="healthy"} 2.0' in body
        nc = await nats.connect(nats_url)  # a decision that is no event: counted on the bus's counters
        try:
            await nc.jetstream().publish("gpubus.allocation.decided.cli-node", b"\xc1 not msgpack")
        finally:
            await nc.close()

        async def counted() -> bool:
            return "gpubus_bus_decode_errors_total 1.0" in await metrics()

        await wait_until(counted, what="the undecodable decision counted")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0


async def test_cli_without_gpus_or_simulation_exits_with_a_clear_message(nats_url: str) -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine")
    proc = await node_agent("--node-name", "no-gpu", "--nats-url", nats_url, "--metrics-port", "0")
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert b"NVML is not usable on this node" in err and b"--simulate" in err


async def test_nats_tls_ca_flag_connects_to_a_nats_that_demands_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    server.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    conf = tmp_path / "tls.conf"
    conf.write_text(f'tls {{ cert_file: "{tmp_path}/server.pem", key_file: "{tmp_path}/server.key" }}\n')
    with NatsServerProcess(tmp_path / "nats", extra_args=("-c", str(conf))) as nats:
        args = ("--node-name", "tls-node", "--metrics-port", "0", "--nats", nats.url)
        async with agent_on_a_kubelet(*args, "--nats-tls-ca", str(tmp_path / "ca.pem")) as (_, kubelet):
            # The agent registers with the kubelet only once the bus is connected and its schema ensured.
            await kubelet.wait_for(lambda: len(kubelet.devices()) == 20, timeout=30)


@pytest.mark.parametrize(("flag", "field"), [("--nats-creds", "creds_file"), ("--nats-tls-ca", "tls_ca")])
async def test_nats_file_flags_naming_a_missing_file_stop_the_agent_naming_the_setting(
    tmp_path: Path, flag: str, field: str
) -> None:
    proc = await node_agent(
        "--node-name", "flags", "--simulate", "2xT4", "--plugin-dir", str(tmp_path / "dp"),
        "--pod-resources-socket", "", "--metrics-port", "0", "--nats-url", "nats://127.0.0.1:1",
        flag, str(tmp_path / "missing"),
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert f"node-agent: bus setting {field}: no such file".encode() in err


@pytest.mark.parametrize(
    ("entry", "setting"),
    [
        ('"devicememoryscaling": NaN', "nodeconfig.devicememoryscaling"),
        ('"devicesplitcount": 1e400', "nodeconfig.devicesplitcount"),
        ('"filterdevices": {"index": [1e400]}', "nodeconfig.filterdevices.index"),
        ('"devicesplitcount": 2.9', "nodeconfig.devicesplitcount"),
    ],
)
async def test_a_per_node_config_number_out_of_range_exits_2_naming_the_setting(
    tmp_path: Path, entry: str, setting: str
) -> None:
    config = tmp_path / "config.json"
    config.write_text(f'{{"nodeconfig": [{{"name": "cfg", {entry}}}]}}')
    proc = await node_agent(
        "--node-name", "cfg", "--simulate", "2xT4", "--plugin-dir", str(tmp_path / "dp"),
        "--pod-resources-socket", "", "--metrics-port", "0", "--nats-url", "nats://127.0.0.1:1",
        "--node-config-file", str(config),
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert f"setting {setting}".encode() in err and b"Traceback" not in err
