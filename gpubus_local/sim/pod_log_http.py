"""``GET /api/v1/namespaces/{ns}/pods/{name}/log`` over aiohttp: a container's log from the simulated
kubelets' files.

Decoding, the checks and the shaping of the answer are ``pod_logs``'s; here are the request, the file
reads and, with ``follow``, the stream: what the file holds, then what is appended, until the container
is no longer running (the pod's status in the store, which the kubelet writes after the last line), the
pod goes, ``limitBytes`` is reached, the client goes or the server stops (which closes every watch).
The store's watch on the pod wakes the stream; a poll every ``FOLLOW_POLL_S`` also notices a client
that went away and lines written without a status change.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp import web

from gpubus_local.sim import pod_logs
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.log_files import PodLogFiles
from gpubus_local.sim.store import Store

FOLLOW_POLL_S = 1.0


class PodLogHandler:
    """The ``pods/log`` subresource; without ``files`` it refuses (404) what it would have read."""

    def __init__(self, store: Store, files: PodLogFiles | None) -> None:
        self.store, self.files = store, files

    async def serve(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["ns"], request.match_info["name"]
        options = pod_logs.parse_options(name, request.query)
        pod = self.store.get("pods", namespace, name)
        target = pod_logs.locate(pod, options)
        if target is None:  # not on a node yet: the real server answers an empty log
            return web.Response(body=b"", content_type="text/plain")
        if self.files is None:
            raise ApiError(404, "NotFound", f"the log of container {target.container} of pod {name} is "
                           "not kept: this API server stand-in has no pod log directory (`gpubus up` gives "
                           "it one)")
        cutoff = pod_logs.since_cutoff(options, time.time_ns())
        if not (options.follow and target.running):
            data = self._read(target.path, 0)
            body = pod_logs.select(data, cutoff_ns=cutoff, tail_lines=options.tail_lines,
                                   timestamps=options.timestamps)
            return web.Response(body=pod_logs.clip(body, options.limit_bytes)[0], content_type="text/plain")
        return await self._follow(request, pod, target, options, cutoff)

    async def _follow(self, request: web.Request, pod: dict[str, Any], target: pod_logs.LogTarget,
                      options: pod_logs.LogOptions, cutoff: int | None) -> web.StreamResponse:
        files, meta = self.files, pod["metadata"]
        assert files is not None
        selector = f"metadata.name={meta['name']},spec.nodeName={pod['spec']['nodeName']}"
        watcher = self.store.watch("pods", meta["namespace"], selector, None, str(self.store.rv))
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        offset, tail, remaining, running = 0, options.tail_lines, options.limit_bytes, True
        try:
            data = self._read(target.path, 0)  # before the headers: a missing file is still a 400
            await response.prepare(request)
            while True:
                whole = pod_logs.complete(data)
                offset += whole
                chunk = pod_logs.select(data[:whole], cutoff_ns=cutoff, tail_lines=tail,
                                        timestamps=options.timestamps)
                chunk, remaining = pod_logs.clip(chunk, remaining)
                tail = None
                if chunk:
                    await response.write(chunk)
                if not running or remaining == 0 or watcher.closed or _client_gone(request):
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FOLLOW_POLL_S):
                        await watcher.ready.wait()
                watcher.drain()
                # the status before the file: the kubelet writes the last line, then ends the container
                running = pod_logs.is_running(self.store.find("pods", meta["namespace"], meta["name"]),
                                              meta["uid"], target.container)
                data = files.read(target.path, offset)
        except (ConnectionResetError, FileNotFoundError):
            pass  # the client went, or the pod and its logs were removed while it was followed
        finally:
            self.store.unwatch(watcher)
        return response

    def _read(self, relative: str, offset: int) -> bytes:
        """The kubelet's 400 where the container's status says it ran but the runtime has no log file."""
        assert self.files is not None
        try:
            return self.files.read(relative, offset)
        except FileNotFoundError:
            path = self.files.root / relative
            raise ApiError.bad_request(f'failed to try resolving symlinks in path "{path}": lstat {path}: '
                                       "no such file or directory") from None


def _client_gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()
