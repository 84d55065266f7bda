"""Server-side printing (``meta.k8s.io/v1 Table``) so a real ``kubectl get`` shows useful columns.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...``; without a Table it
would print only NAME and AGE. Each row carries the object's metadata, or with ``includeObject=Object``
(``kubectl get --sort-by`` sorts by it) the whole object, or with ``None`` nothing. Pure functions;
no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpubus_local.sim import rfc3339
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_errors import go_quote, not_supported

Obj = dict[str, Any]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _ago(timestamp: Any, render: Callable[[int], str]) -> str | None:
    """How long ago an RFC 3339 time was (``...Z`` or an offset, with or without a fraction), whole
    seconds as ``render`` writes them; ``<invalid>`` if it is not such a time, None if absent."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    then = rfc3339.parse_ns(timestamp)
    return "<invalid>" if then is None else render(int((time.time_ns() - then) / rfc3339.NS_PER_S))


def _age(obj: Obj) -> str:
    """The AGE column: the object's ``creationTimestamp`` as :func:`short_duration`."""
    return _ago(obj.get("metadata", {}).get("creationTimestamp"), short_duration) or "<unknown>"


def short_duration(seconds: int) -> str:
    """The AGE column's coarse durations: a count of the largest unit that fits twice (``119s``,
    ``2m``, ``119m``, ``2h``, ``47h``, ``2d``); a time in the future reads ``0s``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _pod_cells(pod: Obj) -> list[Any]:
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    containers = spec.get("containers") or []
    ready = sum(1 for c in status.get("containerStatuses") or [] if c.get("ready"))
    reason, restarts = pod_status_column(pod)
    return [pod["metadata"]["name"], f"{ready}/{len(containers)}", reason, restarts, _age(pod),
            status.get("podIP", "<none>"), spec.get("nodeName", "<none>")]


def _terminated_reason(terminated: Obj, prefix: str = "") -> str:
    if terminated.get("reason"):
        return prefix + str(terminated["reason"])
    if terminated.get("signal"):
        return f"{prefix}Signal:{terminated['signal']}"
    return f"{prefix}ExitCode:{terminated.get('exitCode', 0)}"


def _init_reason(pod: Obj) -> tuple[str | None, int]:
    """The STATUS of a pod still in its init containers (``Init:1/2``, ``Init:Error``), else None."""
    restarts, statuses = 0, (pod.get("status") or {}).get("initContainerStatuses") or []
    total = len((pod.get("spec") or {}).get("initContainers") or [])
    for i, c in enumerate(statuses):
        restarts += int(c.get("restartCount") or 0)
        state = c.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            return _terminated_reason(terminated, "Init:"), restarts
        if waiting and waiting.get("reason") not in (None, "", "PodInitializing"):
            return f"Init:{waiting['reason']}", restarts
        return f"Init:{i}/{total}", restarts
    return None, restarts


def pod_status_column(pod: Obj) -> tuple[str, int]:
    """The STATUS and RESTARTS columns as kubectl's pod printer writes them: the phase, or the pod's
    reason, or the last container's waiting or terminated reason (``Completed`` for a Succeeded pod,
    ``ContainerCreating``), ``Init:...`` during init containers, ``Terminating`` once deleted."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "Pending")
    init, restarts = _init_reason(pod)
    if init is not None:
        reason = init
    else:
        restarts, running = 0, False
        for c in reversed(status.get("containerStatuses") or []):
            restarts += int(c.get("restartCount") or 0)
            state = c.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason"):
                reason = str(waiting["reason"])
            elif terminated:
                reason = _terminated_reason(terminated)
            elif c.get("ready") and state.get("running"):
                running = True
        if reason == "Completed" and running:
            reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, restarts


def _node_cells(node: Obj) -> list[Any]:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    ready = {"True": "Ready", "False": "NotReady"}.get(conditions.get("Ready", ""), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        ready += ",SchedulingDisabled"
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [node["metadata"]["name"], ready, "<none>", _age(node), version]


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: ``45s``, ``3m20s``, ``25m``, ``5h12m``, ``3d4h``, ``2y``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 120:
        return f"{max(s, 0)}s"
    minutes, hours = s // 60, s // 3600
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, hours // 24 % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _since(timestamp: Any) -> str | None:
    """An event's time as :func:`human_duration`; None if absent."""
    return _ago(timestamp, human_duration)


def _event_cells(event: Obj) -> list[Any]:
    """``printEvent``: the last seen time (``series``, else ``lastTimestamp``, else the first), and
    the count (1 for an event without one, as events.k8s.io/v1 writes them)."""
    first = _since(event.get("firstTimestamp")) or _since(event.get("eventTime")) or "<unknown>"
    last = _since(event.get("lastTimestamp")) or first
    count = event.get("count") or 1
    series = event.get("series")
    if isinstance(series, dict):
        last, count = _since(series.get("lastObservedTime")) or last, series.get("count") or count
    involved, source = event.get("involvedObject") or {}, event.get("source") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    origin = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or event.get("reportingInstance") or ""
    return [last, event.get("type", ""), event.get("reason", ""), target, involved.get("fieldPath", ""),
            f"{origin}, {host}" if host else origin, str(event.get("message") or "").strip(), first, count,
            event["metadata"]["name"]]


def _plain_cells(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj)]


_COLUMNS: dict[str, tuple[list[tuple[str, int]], Callable[[Obj], list[Any]]]] = {
    "pods": ([("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1),
              ("Node", 1)], _pod_cells),
    "nodes": ([("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0)], _node_cells),
    "events": ([("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1), ("Source", 1),
                ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1)], _event_cells),
}


_INCLUDE_OBJECT = ("Metadata", "None", "Object")


def include_object(value: str | None) -> str:
    """The ``includeObject`` of a Table request (empty: Metadata); anything else is the real 400."""
    if not value:
        return "Metadata"
    if value not in _INCLUDE_OBJECT:
        supported = ", ".join(map(go_quote, _INCLUDE_OBJECT))
        error = not_supported("includeObject", go_quote(value), supported)
        raise ApiError.bad_request(f"unexpected TableOptions: {error}")
    return value


def _row_object(item: Obj, include: str) -> Obj | None:
    if include == "Object":
        return item
    if include == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]}


def as_table(resource: str, items: list[Obj], rv: str, include: str = "Metadata") -> Obj:
    columns, cells = _COLUMNS.get(resource, ([("Name", 0), ("Age", 0)], _plain_cells))
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": [
            {"name": name, "type": "string", "format": "name" if name == "Name" else "", "description": "",
             "priority": priority}
            for name, priority in columns
        ],
        "rows": [{"cells": cells(item), "object": _row_object(item, include)} for item in items],
    }
