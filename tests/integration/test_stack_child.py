"""``gpubus up``'s children: the environment each gets, and where the simulated hosts keep files
(the running nodes process is checked in tests/e2e/test_pipeline.py)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from gpubus_local.stack import Child
from gpubus_local.stack_scratch import host_scratch_root


async def _no_probe() -> bool:
    return True


async def _child_sees(tmp_path: Path, name: str, defaults: dict[str, str]) -> str:
    log = tmp_path / f"{name}.log"
    child = Child(name, [sys.executable, "-c", "import os; print('seen', os.environ.get('GPUBUS_T_VAR'))"],
                  log, _no_probe, env=defaults)
    await child.start()
    assert await child.wait_exit() == 0
    return next(line for line in log.read_text().splitlines() if line.startswith("seen "))


async def test_a_child_gets_its_defaults_unless_the_caller_set_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUBUS_T_VAR", raising=False)
    assert await _child_sees(tmp_path, "default", {"GPUBUS_T_VAR": "default"}) == "seen default"
    monkeypatch.setenv("GPUBUS_T_VAR", "caller")
    assert await _child_sees(tmp_path, "caller", {"GPUBUS_T_VAR": "default"}) == "seen caller"
    assert await _child_sees(tmp_path, "none", {}) == "seen caller"


def test_simulated_hosts_keep_files_in_the_first_writable_root(tmp_path: Path) -> None:
    missing, a_file, memory = tmp_path / "missing", tmp_path / "a-file", tmp_path / "memory"
    a_file.write_text("")
    memory.mkdir()
    assert host_scratch_root((str(missing), str(a_file), str(memory))) == str(memory)
    assert host_scratch_root((str(missing),)) == tempfile.gettempdir()
