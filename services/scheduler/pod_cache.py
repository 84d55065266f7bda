"""The pods /filter last saw, so that /prioritize and /bind reuse filter's work.

kube-scheduler sends the whole pod to /filter and /prioritize but only its name and UID to /bind.
The cache keeps the last pods filter saw (bounded, oldest dropped first) with the GPU request parsed
from each: prioritize reuses the parse when it gets the very same pod (UID and resourceVersion),
and bind reads the pod from here before asking the API server.

Pure and in memory; must not know HTTP, the ledger or Fit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from shared.model import PodRequest

#: Pods remembered from /filter so /bind needs no API read (bounded, oldest dropped first).
POD_CACHE_SIZE = 4096


class PodCache:
    """The last pods seen by filter, by UID, with the request parsed from each: prioritize and bind
    reuse the parse, and bind reads the spec from here before asking the API."""

    def __init__(self, size: int = POD_CACHE_SIZE) -> None:
        self._pods: OrderedDict[str, tuple[Mapping[str, Any], PodRequest | None]] = OrderedDict()
        self._size = size

    def put(self, uid: str, pod: Mapping[str, Any], request: PodRequest | None = None) -> None:
        if not uid:
            return
        self._pods[uid] = (pod, request)
        self._pods.move_to_end(uid)
        while len(self._pods) > self._size:
            self._pods.popitem(last=False)

    def request(self, pod: Mapping[str, Any]) -> PodRequest | None:
        """The request parsed from this very pod (same UID and resourceVersion), if held."""
        meta = pod.get("metadata")
        if type(meta) is not dict:
            return None
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        held = self._pods.get(uid) if type(uid) is str and version else None
        if held is None or held[1] is None:
            return None
        return held[1] if (held[0].get("metadata") or {}).get("resourceVersion") == version else None

    def pop(self, uid: str) -> tuple[Mapping[str, Any], PodRequest | None] | None:
        return self._pods.pop(uid, None)
