"""``gpubus submit`` and ``gpubus get pods`` refuse bad input in one line, before any pod is made.

Cases: --count past its bound (a huge one used to copy every pod in memory first), --timeout
that is not more than 0 (negative, zero, NaN); a kubeconfig that is empty, a YAML list, or not
YAML at all. Real processes; the kubeconfig cases need no API server, since the file is read first.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def gpubus(*args: str, timeout: float = 60) -> tuple[int, str, str]:  # noqa: ASYNC109
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gpubus", *args, stdout=pipe,
                                                stderr=pipe, env={**os.environ, "COLUMNS": "300"})
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def one_line(text: str) -> str:
    """typer's error box as one line: frame characters dropped, wrapped lines joined."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--count", "99999999999", "Input should be less than or equal to 10000"),
    ("--count", "10001", "Input should be less than or equal to 10000"),
    ("--count", "0", "Input should be greater than or equal to 1"),
    ("--timeout", "-5", "-5.0 is not more than 0 seconds"),
    ("--timeout", "0", "0.0 is not more than 0 seconds"),
    ("--timeout", "nan", "nan is not more than 0 seconds"),
])
async def test_a_bad_submit_option_names_the_flag(tmp_path: Path, flag: str, value: str, says: str) -> None:
    code, _, err = await gpubus("submit", str(EXAMPLES / "pod-small.yaml"), f"{flag}={value}",
                                "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert code == 2, err
    assert f"Invalid value for '{flag}': {says}" in one_line(err), err


@pytest.mark.parametrize(("content", "says"), [
    ("", "not a kubeconfig (empty, or not a YAML mapping)"),
    ("- a\n- b\n", "not a kubeconfig (empty, or not a YAML mapping)"),
    ("a: [1\nb: }\n", "not valid YAML (expected ',' or ']', but got ':' at line 2, column 2)"),
])
@pytest.mark.parametrize("command", [("submit", str(EXAMPLES / "pod-small.yaml")), ("get", "pods")])
async def test_a_broken_kubeconfig_is_one_line(tmp_path: Path, content: str, says: str,
                                               command: tuple[str, ...]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(content)
    code, _, err = await gpubus(*command, "--kubeconfig", str(kubeconfig))
    assert code in (1, 2)
    assert err.splitlines() == [f"error: cannot use kubeconfig {kubeconfig}: {says}"], err
