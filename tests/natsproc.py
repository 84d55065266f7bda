"""A real ``nats-server`` process for tests: start, stop, restart on the same port and store.

The same :class:`~gpubus_local.natsserver.EmbeddedNats` that ``gpubus up`` runs, with a free port by
default; used by the session fixture in ``conftest.py`` and by tests that take NATS down
("NATS is gone") and bring it back. Waits on the server's greeting, never on a sleep.
"""

from __future__ import annotations

from pathlib import Path

from gpubus_local.natsserver import EmbeddedNats, free_port, nats_server_binary, wait_until_serving

__all__ = ["NatsServerProcess", "free_port", "nats_server_binary", "wait_until_serving"]


class NatsServerProcess(EmbeddedNats):
    """``nats-server -a 127.0.0.1 -p PORT -js -sd STORE [extra args]`` on a free port by default."""

    def __init__(self, store_dir: Path, port: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
        super().__init__(store_dir, port=port or free_port(), extra_args=extra_args)
