"""Run the real ``kubectl`` against a simulated API server, the way a user of ``gpubus up`` does.

Each call gets its own discovery/OpenAPI cache directory (kubectl caches discovery per server
address for minutes, and tests reuse ports), a timeout, and returns ``(returncode, stdout,
stderr)``. ``needs_kubectl`` skips a test where no kubectl is installed.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

needs_kubectl: pytest.MarkDecorator = pytest.mark.skipif(shutil.which("kubectl") is None,
                                                         reason="kubectl not installed")


def _argv(kubeconfig: Path, *args: str) -> list[str]:
    cache = kubeconfig.parent / f"{kubeconfig.name}.kubectl-cache"
    return ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache), *args]


async def spawn_kubectl(kubeconfig: Path, *args: str) -> asyncio.subprocess.Process:
    """A kubectl left running (``logs -f``, ``get -w``) with piped stdout/stderr; the caller reaps it."""
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(*_argv(kubeconfig, *args), stdin=asyncio.subprocess.DEVNULL,
                                                stdout=pipe, stderr=pipe)


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None,
                  timeout_s: float = 30.0) -> tuple[int, str, str]:
    """``kubectl --kubeconfig KUBECONFIG ARGS...`` with a private cache dir next to the kubeconfig."""
    pipe = asyncio.subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(
        *_argv(kubeconfig, *args),
        stdin=pipe if stdin is not None else asyncio.subprocess.DEVNULL, stdout=pipe, stderr=pipe)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None),
                                          timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
