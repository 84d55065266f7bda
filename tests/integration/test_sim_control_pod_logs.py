"""The API server stand-in's process (``gpubus sim-control``) starts with an empty pod log directory.

Its pods live in memory, so when it restarts (``docker compose`` keeps ``/state/pod-logs`` on a volume)
every log there belongs to a pod that is gone. Case matrix: ``PodLogFiles.clear`` empties a directory
of pod logs and makes a missing one; the real ``sim-control`` process, started on a directory with a
stale pod's log, serves with the directory empty and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from asyncwait import wait_until

from gpubus_local.sim.log_files import PodLogFiles

T0 = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z


def stale_logs(root: Path) -> PodLogFiles:
    files = PodLogFiles(root)
    files.write("default", "old", "u-1", "main", lines=["from a pod of the last run"], time_ns=T0)
    assert any(root.iterdir())
    return files


def test_clear_empties_the_directory_and_makes_a_missing_one(tmp_path: Path) -> None:
    files = stale_logs(tmp_path / "pods")
    files.clear()
    assert list((tmp_path / "pods").iterdir()) == []
    PodLogFiles(tmp_path / "missing").clear()
    assert (tmp_path / "missing").is_dir()


async def test_sim_control_starts_with_no_stale_pod_logs(tmp_path: Path) -> None:
    pods, ready, ca = tmp_path / "pods", tmp_path / "control.ready", tmp_path / "ca.crt"
    stale_logs(pods)
    ca.write_bytes(b"")  # read at start, used only when a pod is created (none is)
    with (tmp_path / "control.log").open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpubus", "sim-control", "--port", "0",
            "--kubeconfig", str(tmp_path / "kubeconfig"), "--webhook-url", "https://127.0.0.1:9/mutate",
            "--webhook-ca", str(ca), "--pod-log-dir", str(pods), "--ready-file", str(ready),
            "--log-level", "warning", stdout=out, stderr=out)
    try:
        await wait_until(lambda: ready.exists() or proc.returncode is not None, timeout=60, what="ready")
        assert ready.exists(), (tmp_path / "control.log").read_text()
        assert pods.is_dir() and list(pods.iterdir()) == []
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0, (tmp_path / "control.log").read_text()
