"""The embedded 3-server NATS cluster of ``gpubus up --nats-cluster 3``: clustered over loopback routes.

Each server is an :class:`~gpubus_local.natsserver.EmbeddedNats` with its own client port, route port,
monitoring port, server name and JetStream store (``<store>/<server name>``), all fixed for the
cluster's life so a killed server restarts as the same RAFT peer. :meth:`EmbeddedCluster.start`
returns once every server reports JetStream healthy (a meta leader elected), so the services'
first stream create does not meet an election. It knows nothing about gpubus streams or services.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from gpubus_local.natsserver import EmbeddedNats, NatsServerError, free_port

CLUSTER_NAME = "gpubus"
#: Most servers of an embedded cluster (JetStream keeps at most 5 replicas).
MAX_SERVERS = 5
_HEALTH_TIMEOUT_S = 30.0


class EmbeddedCluster:
    """``size`` nats-servers routed to each other on 127.0.0.1; the first listens on ``port``."""

    def __init__(self, store_dir: Path, *, size: int = 3, port: int = 4222, host: str = "127.0.0.1",
                 extra_args: tuple[str, ...] = ()) -> None:
        if not 1 <= size <= MAX_SERVERS:
            raise NatsServerError(f"a NATS cluster of {size} servers: give 1..{MAX_SERVERS}")
        self.store_dir = Path(store_dir)
        self.host = host
        # free_port does not hand out its latest picks again, so these are distinct
        clients = [port + i for i in range(size)] if port else [free_port(host) for _ in range(size)]
        routes = [free_port(host, avoid=clients) for _ in range(size)]
        monitors = [free_port(host, avoid=clients) for _ in range(size)]
        self.monitor_ports = dict(zip(self._names(size), monitors, strict=True))
        self.servers: dict[str, EmbeddedNats] = {}
        for name, client, route, monitor in zip(self._names(size), clients, routes, monitors, strict=True):
            others = ",".join(f"nats://{host}:{r}" for r in routes if r != route)
            args = ("--server_name", name, "--cluster_name", CLUSTER_NAME, "--cluster", f"nats://{host}:{route}",
                    "--routes", others, "-m", str(monitor), *extra_args)
            self.servers[name] = EmbeddedNats(self.store_dir / name, port=client, host=host, extra_args=args)

    @staticmethod
    def _names(size: int) -> list[str]:
        return [f"nats-{i}" for i in range(1, size + 1)]

    @property
    def url(self) -> str:
        """Every server's client URL, comma-separated (nats-py takes the list and fails over)."""
        return ",".join(s.url for s in self.servers.values())

    @property
    def running(self) -> bool:
        return all(s.running for s in self.servers.values())

    def exit_code(self) -> int | None:
        """The exit code of a server that died by itself (one killed by :meth:`kill` does not count)."""
        return next((c for s in self.servers.values() if (c := s.exit_code()) is not None), None)

    def start(self, timeout: float = _HEALTH_TIMEOUT_S) -> None:
        """Start every server, then wait until each reports JetStream healthy; NatsServerError if not."""
        try:
            for server in self.servers.values():
                server.start()
            self.wait_healthy(timeout)
        except NatsServerError:
            self.stop()
            raise

    def wait_healthy(self, timeout: float = _HEALTH_TIMEOUT_S, names: list[str] | None = None) -> None:
        """Block until ``/healthz`` of each named (default: every) server answers 200."""
        deadline = time.monotonic() + timeout
        for name in names or list(self.servers):
            while not self._healthy(name):
                if not self.servers[name].running:
                    raise NatsServerError(f"nats-server {name} exited while the cluster formed")
                if time.monotonic() > deadline:
                    raise NatsServerError(f"NATS cluster: {name} has no healthy JetStream after "
                                          f"{timeout:.0f}s (see {self.servers[name].log_path})")
                time.sleep(0.05)  # a readiness probe's interval, not a wait for an outcome

    def _healthy(self, name: str) -> bool:
        url = f"http://{self.host}:{self.monitor_ports[name]}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 10.0) -> None:
        for server in self.servers.values():
            server.stop(timeout)

    def kill(self, name: str) -> None:
        """SIGKILL one server (fault tests); :meth:`revive` starts it again as the same peer."""
        self.servers[name].kill()

    def revive(self, name: str) -> None:
        """Start a killed or stopped server again (same ports, name and store) and wait until healthy."""
        self.servers[name].start()
        self.wait_healthy(names=[name])

    def restart(self) -> None:
        """Every server in turn, each back healthy before the next goes (the cluster keeps a quorum)."""
        for name, server in self.servers.items():
            server.stop()
            self.revive(name)

    def __enter__(self) -> EmbeddedCluster:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
