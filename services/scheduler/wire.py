"""The kube-scheduler extender wire format (``k8s.io/kube-scheduler/extender/v1``) and its parsing.

Owns the exact PascalCase JSON shapes as TypedDicts and the conversion of raw request bodies into
typed arguments, refusing bad input with :class:`ExtenderInputError` (whose ``kind`` is counted).
Keys are matched case-insensitively as Go's decoder does; replies always use PascalCase.
Pure: no aiohttp, no I/O; must not know about Fit or the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict

import orjson

from services.scheduler.errors import ExtenderInputError

#: Bodies larger than this are refused (as HAMi does via ``io.LimitReader(1<<20)``).
MAX_BODY_BYTES = 1 << 20


class BadRequestKind(StrEnum):
    """Label values of the bad-requests metric."""

    TOO_LARGE = "too_large"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    MISSING_POD = "missing_pod"
    BAD_POD = "bad_pod"
    BAD_NODES = "bad_nodes"
    BAD_BINDING = "bad_binding"


class NodeList(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    items: list[dict[str, Any]]


class ExtenderFilterResult(TypedDict):
    Nodes: NodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str] | None
    FailedAndUnresolvableNodes: dict[str, str] | None
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


class ExtenderBindingResult(TypedDict):
    Error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtenderArgs:
    """A parsed filter/prioritize request: the pod and the candidate nodes in either form."""

    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    nodes: NodeList | None
    """The full ``Nodes`` list when kube-scheduler is not nodeCacheCapable; None otherwise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def load_body(body: bytes) -> dict[str, Any]:
    """Bytes -> a JSON object; size, syntax and shape errors are ``ExtenderInputError``."""
    if len(body) > MAX_BODY_BYTES:
        raise too_large(len(body))
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ExtenderInputError(BadRequestKind.NOT_JSON, f"request body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ExtenderInputError(
            BadRequestKind.NOT_OBJECT, f"request body must be a JSON object, got {type(value).__name__}"
        )
    return value


def too_large(size: int | None) -> ExtenderInputError:
    got = "" if size is None else f" of {size} bytes"
    return ExtenderInputError(
        BadRequestKind.TOO_LARGE, f"request body{got} exceeds the {MAX_BODY_BYTES} byte (1 MiB) limit"
    )


def _fold(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level keys lower-cased: Go decodes struct fields case-insensitively."""
    return {k.lower(): v for k, v in obj.items()}


def parse_extender_args(obj: Mapping[str, Any]) -> ExtenderArgs:
    args = _fold(obj)
    pod = args.get("pod")
    if pod is None:
        raise ExtenderInputError(BadRequestKind.MISSING_POD, "extender args missing pod")
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata", {}), dict):
        raise ExtenderInputError(BadRequestKind.BAD_POD, "extender args: Pod must be a Kubernetes Pod object")
    names = args.get("nodenames")
    nodes = args.get("nodes")
    if names is not None:
        # one C-level pass over thousands of names (a generator of isinstance calls costs 50 us)
        if not isinstance(names, list) or (names and set(map(type, names)) != {str}):
            raise ExtenderInputError(
                BadRequestKind.BAD_NODES, "extender args: NodeNames must be a list of strings"
            )
        return ExtenderArgs(pod=pod, node_names=tuple(names), nodes=None)
    if nodes is None:
        raise ExtenderInputError(BadRequestKind.BAD_NODES, "extender args carry neither NodeNames nor Nodes")
    return ExtenderArgs(pod=pod, node_names=_node_list_names(nodes), nodes=nodes)


def _node_list_names(nodes: Any) -> tuple[str, ...]:
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if items is None and isinstance(nodes, dict):
        return ()
    if not isinstance(items, list):
        raise ExtenderInputError(
            BadRequestKind.BAD_NODES, "extender args: Nodes must be a NodeList with items"
        )
    names: list[str] = []
    for i, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise ExtenderInputError(
                BadRequestKind.BAD_NODES, f"extender args: Nodes.items[{i}] has no metadata.name"
            )
        names.append(name)
    return tuple(names)


def parse_binding_args(obj: Mapping[str, Any]) -> BindingArgs:
    args = _fold(obj)
    values: dict[str, str] = {}
    for key in ("podname", "podnamespace", "poduid", "node"):
        value = args.get(key)
        if not isinstance(value, str) or (key != "poduid" and not value):
            raise ExtenderInputError(
                BadRequestKind.BAD_BINDING, "binding args need string PodName, PodNamespace, PodUID and Node"
            )
        values[key] = value
    return BindingArgs(
        pod_name=values["podname"],
        pod_namespace=values["podnamespace"],
        pod_uid=values["poduid"],
        node=values["node"],
    )


def filter_result(
    *,
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    nodes: NodeList | None,
    error: str = "",
) -> ExtenderFilterResult:
    """The reply in the form the request used: ``NodeNames`` or, for the ``Nodes`` form, ``Nodes.items``."""
    if nodes is None:
        return ExtenderFilterResult(
            Nodes=None,
            NodeNames=passed,
            FailedNodes=failed,
            FailedAndUnresolvableNodes=unresolvable or None,
            Error=error,
        )
    keep = set(passed)
    items = [n for n in nodes.get("items") or [] if n["metadata"]["name"] in keep]
    out: NodeList = {k: v for k, v in nodes.items() if k != "items"}  # type: ignore[assignment]
    out["items"] = items
    return ExtenderFilterResult(
        Nodes=out,
        NodeNames=None,
        FailedNodes=failed,
        FailedAndUnresolvableNodes=unresolvable or None,
        Error=error,
    )


def error_result(message: str) -> ExtenderFilterResult:
    return ExtenderFilterResult(
        Nodes=None, NodeNames=None, FailedNodes=None, FailedAndUnresolvableNodes=None, Error=message
    )


def dumps(value: object) -> bytes:
    return orjson.dumps(value)
