"""The launcher's own door to the real API server: JSON over HTTPS as the cluster admin.

Only what setting a local cluster up needs (read an object, create one, ask for a token, wait for
a condition); the services keep their own clients and their own, narrower identities.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import aiohttp

from gpubus_local.kube.pki import Pair

Json = dict[str, Any]


class ApiError(RuntimeError):
    """The API server answered a request with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class AdminApi:
    """An async context manager holding one HTTPS session to ``server``."""

    def __init__(self, server: str, ca: Pair | str, client: Pair) -> None:
        self.server = server.rstrip("/")
        ctx = ssl.create_default_context(cafile=str(ca.cert if isinstance(ca, Pair) else ca))
        ctx.load_cert_chain(str(client.cert), str(client.key))
        self._ssl = ctx
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30.0))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(self, method: str, path: str, body: Json | None = None, *,
                      content_type: str = "application/json") -> Json:
        assert self._session is not None, "use AdminApi as an async context manager"
        async with self._session.request(method, self.server + path, json=body, ssl=self._ssl,
                                         headers={"Content-Type": content_type}) as resp:
            data: Json = await resp.json(content_type=None) if resp.content_length != 0 else {}
            if resp.status >= 400:
                raise ApiError(resp.status, str(data.get("message", data)))
            return data

    async def get(self, path: str) -> Json | None:
        """The object at ``path``, or None if there is none."""
        try:
            return await self.request("GET", path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def create(self, path: str, body: Json) -> Json:
        """POST ``body``; an object that already exists is read back instead."""
        try:
            return await self.request("POST", path, body)
        except ApiError as e:
            if e.status != 409:
                raise
        name = body["metadata"]["name"]
        found = await self.get(f"{path}/{name}")
        assert found is not None
        return found

    async def token(self, namespace: str, service_account: str, *, audiences: list[str] | None = None,
                    pod: Json | None = None, expiration_s: int = 7 * 24 * 3600) -> str:
        """A TokenRequest for ``service_account``, bound to ``pod`` if given (as a kubelet asks)."""
        spec: Json = {"expirationSeconds": expiration_s}
        if audiences:
            spec["audiences"] = audiences
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                      "uid": pod["metadata"]["uid"]}
        answer = await self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return str(answer["status"]["token"])

    async def wait_for(self, path: str, ready: Callable[[Json], bool], *, timeout: float,  # noqa: ASYNC109
                       what: str) -> Json:
        """Poll ``path`` until ``ready`` holds for what it answers (a list or an object)."""
        deadline = time.monotonic() + timeout
        last: Json | None = None
        while time.monotonic() < deadline:
            last = await self.get(path)
            if last is not None and ready(last):
                return last
            await asyncio.sleep(0.25)  # a poll interval for a condition on the server, not a wait for time
        raise TimeoutError(f"{what}: not so after {timeout:.0f}s (last answer: {str(last)[:300]})")


def node_ready(node: Json) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))
