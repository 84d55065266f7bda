"""The gpubus CLI without the local world (package ``gpubus_local``), as in the production image.

The commands run as real processes whose ``gpubus_local`` cannot be imported (``sys.modules`` holds
None for it, which is what an absent package looks like to ``importlib``): the ``gpubus.commands``
entry point that names it adds nothing, every product command is still there, the local world's
are not, and ``gpubus up`` says what is missing before it starts anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

#: ``python -m gpubus`` with the local world's package hidden.
WITHOUT_SIM = ("import runpy, sys; sys.modules['gpubus_local'] = None; "
               "runpy.run_module('gpubus', run_name='__main__', alter_sys=True)")


def gpubus(*args: str, cwd: Path, hide_sim: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", WITHOUT_SIM, *args] if hide_sim else [sys.executable, "-m", "gpubus", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=45, check=False,
                          env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})


def test_gpubus_up_says_the_local_world_is_not_installed_and_starts_nothing(tmp_path: Path) -> None:
    done = gpubus("up", "--data-dir", str(tmp_path / "data"), "--nodes", "1", cwd=tmp_path)
    assert done.returncode == 2, done
    assert "gpubus_local: not installed here, so neither are its commands" in done.stderr, done
    assert "No such command 'up'" in done.stderr, done
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists(), "gpubus up made its data dir"


@pytest.mark.parametrize("command", ["sim-control", "sim-kube-scheduler", "sim-nodes"])
def test_the_local_worlds_commands_exist_only_with_it(tmp_path: Path, command: str) -> None:
    without = gpubus(command, "--help", cwd=tmp_path)
    assert without.returncode == 2, without
    assert f"No such command '{command}'" in without.stderr, without
    with_sim = gpubus(command, "--help", cwd=tmp_path, hide_sim=False)
    assert with_sim.returncode == 0, with_sim
    assert "started by `gpubus up`" in with_sim.stdout, with_sim


def test_every_product_command_is_there_without_the_simulator(tmp_path: Path) -> None:
    done = gpubus("--help", cwd=tmp_path)
    assert done.returncode == 0, done
    for command in ("webhook", "scheduler", "node-agent", "monitor", "tap", "submit", "get", "snapshot"):
        assert f" {command} " in done.stdout, (command, done.stdout)
    assert " up " not in done.stdout, done.stdout
    assert "not installed" not in done.stderr, done  # a known command says nothing of what is absent
