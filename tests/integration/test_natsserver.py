"""``gpubus up``'s embedded nats-server: JetStream on, restarts on its store, refuses a busy port."""

from __future__ import annotations

from pathlib import Path

import pytest

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
