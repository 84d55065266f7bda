"""A grpc.aio server bound to a unix socket, or an error that holds nothing of it.

grpc.aio keeps its engine (a socket pair and a poller thread) up while any server object lives,
started or not, and ``stop()`` does not let go of it: only freeing the object does. A server that
failed to bind stays alive as long as the bind's exception does (a frame of grpc's own
``add_insecure_port`` in its traceback holds it), and if that exception ends up in a reference
cycle, until the cyclic GC happens to run: a failed start would leave two sockets open for an
unknown while. So the failure is raised outside the ``except`` (no ``__context__``), after the last
reference to the server is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc

from services.node_agent.errors import PluginSocketError

#: grpc's limit on a unix socket's path (sun_path is 108 bytes with its NUL).
MAX_SOCKET_PATH = 107


def bind_unix(socket: Path, add: Callable[[grpc.aio.Server], None], what: str) -> grpc.aio.Server:
    """A new server with ``add``'s services, bound (not started) to ``socket``.

    PluginSocketError naming ``what`` when grpc cannot bind (the path too long, its directory
    missing or read-only); no server object outlives the call then."""
    server = grpc.aio.server()
    add(server)
    try:
        server.add_insecure_port(f"unix:{socket}")
        return server
    except RuntimeError:  # grpc's only signal that it cannot bind; its traceback holds the server
        pass
    del server
    raise PluginSocketError(
        f"cannot serve the {what} on {socket}: unix socket paths must be at most {MAX_SOCKET_PATH} "
        f"bytes (this one is {len(str(socket).encode())}) and their directory writable")
