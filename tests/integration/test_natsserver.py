"""``gpubus up``'s embedded nats-server: JetStream on, restarts on its store, refuses a busy port."""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

import pytest

from gpubus_local import natsserver, stack
from gpubus_local.natsserver import EmbeddedNats, NatsServerError


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
        monkeypatch.delenv(natsserver.PORT_SLICE_ENV, raising=False)
        monkeypatch.setattr(natsserver, "_LOWEST_PORT", taken)
        monkeypatch.setattr(natsserver, "_MIN_CANDIDATES", 1)
        monkeypatch.setattr(natsserver, "ephemeral_ports", lambda: range(taken + 1, 65536))
        with pytest.raises(NatsServerError, match=f"no free port found in {taken}-{taken}"):
            natsserver.free_port(attempts=5)


def test_processes_given_slices_of_the_ports_never_pick_the_same_one(monkeypatch: pytest.MonkeyPatch) -> None:
    ports = range(10000, 32768)
    parts = [natsserver.port_slice(ports, f"{i}/4") for i in range(4)]
    assert [len(p) for p in parts] == [5692] * 4
    assert all(a.stop <= b.start for a, b in itertools.pairwise(parts))
    assert natsserver.port_slice(ports, "") == ports
    for bad in ("4/4", "-1/4", "1", "a/b", "0/1000"):
        with pytest.raises(NatsServerError, match=natsserver.PORT_SLICE_ENV):
            natsserver.port_slice(ports, bad)
    # the pick honours the slice this process was given
    monkeypatch.setenv(natsserver.PORT_SLICE_ENV, "3/4")
    top = natsserver.ephemeral_ports().start
    mine = natsserver.port_slice(range(10000, top), "3/4")
    assert all(natsserver.free_port() in mine for _ in range(30))


def _own_candidates(count: int) -> range:
    """The top ``count`` ports of this worker's slice: no other worker picks them."""
    top = natsserver.ephemeral_ports().start
    slice_ = natsserver.port_slice(range(10000, top), os.environ.get(natsserver.PORT_SLICE_ENV, ""))
    return range(slice_.stop - count, slice_.stop)


def test_picks_not_yet_bound_are_not_handed_out_again_while_others_are_free(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a stack and its NATS cluster choose their ports apart and bind them later: CI run M had the
    # API server stand-in and a NATS server of the same stack both given 28902
    mine = _own_candidates(20)
    monkeypatch.setattr(natsserver, "port_slice", lambda ports, spec: mine)
    monkeypatch.setattr(natsserver, "_handed_out", {})
    free = [p for p in mine if natsserver.port_is_free(p)]
    picks = [natsserver.free_port(attempts=400) for _ in free]
    assert sorted(picks) == free
    again = natsserver.free_port(attempts=400)  # every candidate handed out: one is given again
    assert again in free
    # ports the caller chose otherwise are never given, even then
    assert natsserver.free_port(attempts=400, avoid=free[1:]) == free[0]


def test_a_host_whose_ephemeral_range_starts_low_gets_a_port_from_the_kernel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    low = tmp_path / "ip_local_port_range"
    low.write_text("1024\t65535\n")
    monkeypatch.setattr(natsserver, "_EPHEMERAL_RANGE", low)
    assert natsserver.ephemeral_ports() == range(1024, 65536)
    ports = {natsserver.free_port() for _ in range(20)}
    assert len(ports) > 1  # not the one port left below the range, every time
    assert all(natsserver.port_is_free(p) for p in ports)
    low.write_text("garbage")  # unreadable: IANA's range is assumed
    assert natsserver.ephemeral_ports() == range(49152, 65536)


def test_stack_ports_chosen_apart_are_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    # five picks over five free candidates: each stack port gets one of its own
    monkeypatch.setattr(natsserver, "_handed_out", {})
    mine = _own_candidates(40)
    free = [p for p in mine if natsserver.port_is_free(p)][:5]
    monkeypatch.setattr(natsserver, "port_slice", lambda ports, spec: range(free[0], free[-1] + 1))
    monkeypatch.setattr(natsserver, "port_is_free", lambda port, host="127.0.0.1": port in free)
    ports = stack.Ports.choose(0)
    chosen = (ports.apiserver, ports.webhook, ports.scheduler, ports.monitor, ports.dashboard)
    assert sorted(chosen) == free
