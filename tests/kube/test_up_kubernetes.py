"""``gpubus up --control-plane kubernetes`` as a user runs it: up, an example Running, Ctrl-C, nothing left,
in both modes (``--mode extender``, the default, and ``--mode dra``, where the same example runs as
a claim the webhook made).

Also the option checks that need no cluster: ``--nats`` is refused there (per-node identity needs
the embedded NATS), and ``--mode dra`` without the real control plane, each with exit code 2.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asyncwait import wait_until
from kube_harness import kube_binaries

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]


def _up(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "gpubus", "up", "--control-plane", "kubernetes",
            "--data-dir", str(data_dir), "--nats-port", "0", *args]


def _processes_of(data_dir: Path) -> list[str]:
    """Command lines of live processes that name ``data_dir`` (every part of the stack does)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(data_dir) in text:
            found.append(text[:200])
    return found


def test_nats_url_is_refused_on_the_real_control_plane(tmp_path: Path) -> None:
    done = subprocess.run(_up(tmp_path / "up", "--nats", "nats://127.0.0.1:4222"), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "--nats" in done.stderr


def test_dra_mode_is_refused_on_the_simulator(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "gpubus", "up", "--data-dir", str(tmp_path / "up"), "--mode", "dra"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "--mode" in done.stderr and "--control-plane kubernetes" in done.stderr


@pytest.mark.parametrize("mode", ["extender", "dra"])
async def test_up_runs_an_example_and_ctrl_c_stops_everything(tmp_path: Path, mode: str) -> None:
    binaries = kube_binaries()
    data_dir = tmp_path / "up"
    out = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(*_up(data_dir, "--nodes", "1", "--mode", mode), cwd=ROOT,
                                                stdout=out, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(300):
            while not any("gpubus is up" in line for line in seen):
                line = (await proc.stdout.readline()).decode()
                assert line, "gpubus up ended before it was up:\n" + "".join(seen[-30:])
                seen.append(line)
        kubectl = [str(binaries["kubectl"]), "--kubeconfig", str(data_dir / "kubeconfig")]
        example = str(ROOT / "examples" / "pod-small.yaml")
        made = await asyncio.to_thread(subprocess.run, [*kubectl, "create", "-f", example, "-o", "name"],
                                       capture_output=True, text=True, timeout=60, check=False)
        assert made.returncode == 0, f"kubectl create refused the example: {made.stderr}"
        created = made.stdout.strip()

        pods: list[dict[str, Any]] = []

        async def phase() -> bool:
            done = await asyncio.to_thread(subprocess.run, [*kubectl, "get", created, "-o", "json"],
                                           capture_output=True, text=True, timeout=60, check=True)
            pods[:] = [json.loads(done.stdout)]
            return pods[0].get("status", {}).get("phase") in ("Running", "Succeeded")
        await wait_until(phase, 120, what=f"{created} Running")
        claims = pods[0]["spec"].get("resourceClaims")
        assert bool(claims) is (mode == "dra"), pods[0]["spec"]
        assert any(f"in {mode} mode" in line for line in seen), seen
        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(120):
            rest = (await proc.stdout.read()).decode()
        assert await proc.wait() == 0, rest
        assert "stopping gpubus" in rest
        assert not _processes_of(data_dir), "left running after gpubus up stopped"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
