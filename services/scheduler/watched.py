"""The pods of ours that wait for a bind, whole, as the leader's pod watch last showed them.

/bind must read the pod as the API server has it (a /filter body is only a claim). The leader's
pod watch already decodes every version of every pod, so it keeps here the whole object of each
pod of ours that is not bound yet, and a bind reads that instead of GETting the pod: one HTTP
exchange less per pod for the scheduler and the API server. A pod the watch has not shown yet,
or a standby (which does not watch), is read from the API as before. Bounded by the pods that wait
for a bind; in memory, no I/O. Must not know HTTP, the ledger or Fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TERMINAL = frozenset({"Succeeded", "Failed"})


def awaits_bind(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """True for a pod of ours (``schedulerName``; every pod when that is "") not bound yet and not
    finished: a bind may come for it."""
    spec = pod.get("spec") or {}
    return (
        (not scheduler_name or spec.get("schedulerName") == scheduler_name)
        and not spec.get("nodeName")
        and (pod.get("status") or {}).get("phase") not in _TERMINAL
    )


class AwaitingPods:
    """UID -> the whole pod, for the pods :func:`awaits_bind` holds for, as last watched."""

    def __init__(self) -> None:
        self._pods: dict[str, Mapping[str, Any]] = {}

    def put(self, uid: str, pod: Mapping[str, Any]) -> None:
        self._pods[uid] = pod

    def drop(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def clear(self) -> None:
        """Forget every pod: the watch that kept them stopped (a deposed leader)."""
        self._pods.clear()

    def get(self, uid: str) -> Mapping[str, Any] | None:
        return self._pods.get(uid)

    def __len__(self) -> int:
        return len(self._pods)
