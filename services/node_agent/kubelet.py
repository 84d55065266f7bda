"""The kubelet side of the device plugin: our gRPC server's socket, Register, and re-registration.

Serves the servicer on ``<plugin_dir>/<socket>`` (serving before registering, as the kubelet
requires), registers with ``kubelet.sock``, and polls once per ``watch_interval_s`` for a
kubelet restart (``kubelet.sock`` re-created with a new inode, or our socket deleted); then it
re-creates its server and registers again. A failed registration is retried on the next tick.
It knows nothing about allocations.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

import grpc

from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from services.node_agent.errors import PluginSocketError
from services.node_agent.grpc_bind import bind_unix
from services.node_agent.metrics import NodeAgentMetrics
from services.node_agent.plugin import DevicePluginServicer
from services.node_agent.settings import NodeAgentSettings

log = logging.getLogger(__name__)

VERSION = "v1beta1"
_REGISTER_TIMEOUT_S = 5.0


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


class PluginServer:
    """Keeps one device plugin server registered with the kubelet for the agent's lifetime."""

    def __init__(
        self, settings: NodeAgentSettings, servicer: DevicePluginServicer, metrics: NodeAgentMetrics
    ) -> None:
        self._settings = settings
        self._servicer = servicer
        self._metrics = metrics
        self._server: grpc.aio.Server | None = None
        self._socket = settings.plugin_socket
        self._kubelet = settings.kubelet_socket
        """Both paths built once: every agent looks at them every ``watch_interval_s``."""
        self._socket_inode: int | None = None
        self._kubelet_inode: int | None = None
        self.registrations = 0
        """Successful registrations so far (tests and the simulator wait on it)."""

    async def start(self) -> None:
        """Serve, then try to register once; the watch loop (:meth:`run`) keeps it registered."""
        await self._serve()
        await self._register()

    async def run(self) -> None:
        """Poll for kubelet restarts forever (an owned task of the app)."""
        while True:
            await asyncio.sleep(self._settings.watch_interval_s)
            await self.check()

    async def check(self) -> None:
        """One tick: re-serve if our socket vanished, re-register if the kubelet is new or we are not."""
        kubelet = _inode(self._kubelet)
        ours_gone = _inode(self._socket) != self._socket_inode
        if ours_gone:
            log.info("plugin socket %s is gone (kubelet restart?); serving again", self._socket)
            await self._serve()
        if kubelet is not None and (ours_gone or kubelet != self._kubelet_inode):
            await self._register()

    async def _serve(self) -> None:
        await self._stop_server()
        try:
            with contextlib.suppress(FileNotFoundError):
                self._socket.unlink()
            self._socket.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PluginSocketError(f"cannot prepare the device plugin socket {self._socket}: {e}") from e
        server = bind_unix(self._socket, self._add_servicer, "device plugin")
        await server.start()
        self._server = server
        self._socket_inode = _inode(self._socket)

    def _add_servicer(self, server: grpc.aio.Server) -> None:
        pb_grpc.add_DevicePluginServicer_to_server(self._servicer, server)

    async def _register(self) -> None:
        kubelet = self._kubelet
        inode = _inode(kubelet)
        if inode is None:
            log.info("kubelet socket %s not there yet; will register when it appears", kubelet)
            return
        request = pb.RegisterRequest(
            version=VERSION,
            endpoint=self._settings.socket_name,
            resource_name=self._settings.resource_name,
            options=self._servicer.options,
        )
        try:
            async with grpc.aio.insecure_channel(f"unix:{kubelet}") as channel:
                await pb_grpc.RegistrationStub(channel).Register(request, timeout=_REGISTER_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            self._metrics.registrations.labels(result="failed").inc()
            log.warning(
                "registering %s with the kubelet failed: %s %s",
                self._settings.resource_name,
                e.code().name,
                e.details(),
            )
            self._kubelet_inode = None  # retry on the next tick
            return
        self._kubelet_inode = inode
        self.registrations += 1
        self._metrics.registrations.labels(result="ok").inc()
        log.info(
            "registered %s with the kubelet (endpoint %s)",
            self._settings.resource_name,
            self._settings.socket_name,
        )

    async def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)

    async def stop(self) -> None:
        await self._stop_server()
        if _inode(self._socket) == self._socket_inode:
            with contextlib.suppress(FileNotFoundError):
                self._socket.unlink()
