"""kube-scheduler's side of the scheduler extender HTTP API (``k8s.io/kube-scheduler/extender/v1``).

Requests carry the PascalCase keys Go's ``encoding/json`` emits for the untagged extender structs
(``Pod``, ``Nodes``, ``NodeNames``; ``PodName``, ``PodNamespace``, ``PodUID``, ``Node``); replies
are read case-insensitively, as Go decodes them. ``POST <urlPrefix>/<verb>``; anything but HTTP
200 is an error. With ``nodeCacheCapable`` the scheduler sends and reads ``NodeNames`` (every name
returned must have been sent); otherwise it sends a full ``Nodes`` NodeList and reads only ``Nodes``.
One keep-alive aiohttp session; orjson on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import aiohttp
import orjson

from gpubus_local.sim.errors import SimError
from shared.errors import Retryable
from shared.kube_types import Node, Pod

MAX_PRIORITY = 10


class ExtenderArgs(TypedDict):
    Pod: Pod
    Nodes: dict[str, Any] | None
    NodeNames: list[str] | None


class ExtenderBindingArgs(TypedDict):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtenderConfig:
    """One ``extenders[]`` entry of a KubeSchedulerConfiguration."""

    url_prefix: str
    """e.g. ``http://127.0.0.1:8888/scheduler``; a trailing ``/`` is stripped."""
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    bind_verb: str = "bind"
    """Empty: the scheduler POSTs the Binding itself."""
    weight: int = 1
    node_cache_capable: bool = True
    http_timeout_s: float = 5.0
    managed_resources: tuple[str, ...] = ()
    """Empty: every pod interests the extender; else only pods requesting one of these."""
    ignorable: bool = False
    """A failing ignorable extender is skipped instead of failing the pod."""

    def interested_in(self, pod: Pod) -> bool:
        if not self.managed_resources:
            return True
        spec = pod.get("spec") or {}
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            resources = container.get("resources") or {}
            names = {*(resources.get("limits") or {}), *(resources.get("requests") or {})}
            if names.intersection(self.managed_resources):
                return True
        return False


class ExtenderError(SimError, Retryable):
    """The extender failed the call (transport, non-200, bad JSON, or a non-empty ``Error``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterResult:
    nodes: list[str]
    failed: dict[str, str]
    unresolvable: dict[str, str]


def _folded(reply: Any) -> dict[str, Any]:
    """Go decodes JSON object keys case-insensitively; so do we."""
    if not isinstance(reply, dict):
        raise ExtenderError(f"expected a JSON object, got {type(reply).__name__}")
    return {str(key).lower(): value for key, value in reply.items()}


def _host_score(entry: Any) -> tuple[str, int]:
    """One HostPriority; the two usual spellings are read directly, any other is folded as Go does."""
    if isinstance(entry, dict):
        for host_key, score_key in (("host", "score"), ("Host", "Score")):
            if host_key in entry and score_key in entry:
                return str(entry[host_key]), int(entry[score_key] or 0)
    folded = _folded(entry)
    return str(folded.get("host")), int(folded.get("score") or 0)


def _node_names(node_list: Any) -> list[str]:
    items = (node_list or {}).get("items") or [] if isinstance(node_list, dict) else []
    return [item["metadata"]["name"] for item in items]


class ExtenderClient:
    """Calls one extender; ``close()`` releases the connection pool."""

    def __init__(self, config: ExtenderConfig) -> None:
        self.config = config
        self._prefix = config.url_prefix.rstrip("/")
        self._session = aiohttp.ClientSession(
            # No limit on connections, as Go's HTTP transport in kube-scheduler's extender client: a
            # limit makes the cycle's /filter wait behind binds waiting for their Allocate leases.
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=config.http_timeout_s),
            json_serialize=lambda obj: orjson.dumps(obj).decode(),
        )

    async def close(self) -> None:
        await self._session.close()

    async def _post(self, verb: str, body: Any) -> Any:
        url = f"{self._prefix}/{verb}"
        try:
            async with self._session.post(url, data=orjson.dumps(body),
                                          headers={"Content-Type": "application/json"}) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise ExtenderError(f"{verb}: HTTP {resp.status}: {raw[:300].decode(errors='replace')}")
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ExtenderError(f"{verb}: {type(e).__name__}: {e}") from e
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise ExtenderError(f"{verb}: reply is not JSON: {e}") from e

    def _args(self, pod: Pod, nodes: list[Node]) -> ExtenderArgs:
        if self.config.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        return {"Pod": pod, "Nodes": {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": nodes},
                "NodeNames": None}

    async def filter(self, pod: Pod, nodes: list[Node]) -> FilterResult:
        reply = _folded(await self._post(self.config.filter_verb, self._args(pod, nodes)))
        if reply.get("error"):
            raise ExtenderError(f"filter: {reply['error']}")
        sent = {n["metadata"]["name"] for n in nodes}
        if self.config.node_cache_capable:
            names = list(reply.get("nodenames") or [])
        else:
            names = _node_names(reply.get("nodes"))
        unknown = [name for name in names if name not in sent]
        if unknown:
            raise ExtenderError(f"filter: extender returned nodes that were not sent: {unknown[:5]}")
        return FilterResult(nodes=names, failed=dict(reply.get("failednodes") or {}),
                            unresolvable=dict(reply.get("failedandunresolvablenodes") or {}))

    async def prioritize(self, pod: Pod, nodes: list[Node]) -> dict[str, int]:
        """Host -> score * weight * (100 / 10), as kube-scheduler adds it to the plugin scores."""
        reply = await self._post(self.config.prioritize_verb, self._args(pod, nodes))
        if not isinstance(reply, list):
            raise ExtenderError("prioritize: expected a JSON array of HostPriority")
        scores: dict[str, int] = {}
        scale = self.config.weight * (100 // MAX_PRIORITY)
        for entry in reply:
            host, score = _host_score(entry)
            scores[host] = score * scale
        return scores

    async def bind(self, pod: Pod, node: str) -> None:
        meta = pod["metadata"]
        args: ExtenderBindingArgs = {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                     "PodUID": meta["uid"], "Node": node}
        reply = _folded(await self._post(self.config.bind_verb, args))
        if reply.get("error"):
            raise ExtenderError(f"bind: {reply['error']}")
