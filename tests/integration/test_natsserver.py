"""``gpubus up``'s embedded nats-server: JetStream on, restarts on its store, refuses a busy port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpubus import natsserver
from gpubus.natsserver import EmbeddedNats, NatsServerError


def test_starts_restarts_on_the_same_port_and_says_when_the_port_is_busy(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "a", port=0) as first:
        assert first.running
        second = EmbeddedNats(tmp_path / "b", port=first.port)
        with pytest.raises(NatsServerError, match=rf"port {first.port} is busy"):
            second.start()
        first.restart()
        assert first.running
        assert (tmp_path / "a" / "jetstream").exists()
    assert not first.running


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_the_server_runs_one_go_thread_unless_the_caller_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    with EmbeddedNats(tmp_path / "a", port=0) as server:
        assert server.pid is not None
        assert _environ(server.pid)["GOMAXPROCS"] == "1"
    monkeypatch.setenv("GOMAXPROCS", "3")
    with EmbeddedNats(tmp_path / "b", port=0) as server:
        assert server.pid is not None
        assert _environ(server.pid)["GOMAXPROCS"] == "3"


def test_free_ports_lie_below_the_range_outgoing_connections_take(monkeypatch: pytest.MonkeyPatch) -> None:
    ephemeral = natsserver.ephemeral_ports()
    chosen = {natsserver.free_port() for _ in range(50)}
    assert all(natsserver.port_is_free(p) for p in chosen)
    assert all(10000 <= p < ephemeral.start for p in chosen)
    # a port somebody listens on is never chosen: with only one candidate left, it is refused
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        monkeypatch.setattr(natsserver, "_LOWEST_PORT", taken)
        monkeypatch.setattr(natsserver, "ephemeral_ports", lambda: range(taken + 1, 65536))
        with pytest.raises(NatsServerError, match=f"no free port found in {taken}-{taken}"):
            natsserver.free_port(attempts=5)
