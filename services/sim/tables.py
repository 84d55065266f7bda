"""Server-side printing (``meta.k8s.io/v1 Table``) so a real ``kubectl get`` shows useful columns.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...``; without a Table it
would print only NAME and AGE. Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _age(obj: Obj) -> str:
    created = obj.get("metadata", {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = int((datetime.now(UTC) - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC))
                  .total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _pod_cells(pod: Obj) -> list[Any]:
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    containers = spec.get("containers") or []
    ready = sum(1 for c in status.get("containerStatuses") or [] if c.get("ready"))
    phase = status.get("phase", "Pending")
    if phase == "Pending" and not spec.get("nodeName"):
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        if conditions.get("PodScheduled", {}).get("status") == "False":
            phase = "Pending (unschedulable)"
    return [pod["metadata"]["name"], f"{ready}/{len(containers)}", phase, 0, _age(pod),
            status.get("podIP", "<none>"), spec.get("nodeName", "<none>")]


def _node_cells(node: Obj) -> list[Any]:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    ready = {"True": "Ready", "False": "NotReady"}.get(conditions.get("Ready", ""), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        ready += ",SchedulingDisabled"
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [node["metadata"]["name"], ready, "<none>", _age(node), version]


def _plain_cells(obj: Obj) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj)]


_COLUMNS: dict[str, tuple[list[tuple[str, int]], Callable[[Obj], list[Any]]]] = {
    "pods": ([("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0), ("IP", 1),
              ("Node", 1)], _pod_cells),
    "nodes": ([("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0)], _node_cells),
}


def as_table(resource: str, items: list[Obj], rv: str) -> Obj:
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
        "rows": [
            {"cells": cells(item), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                              "metadata": item["metadata"]}}
            for item in items
        ],
    }
