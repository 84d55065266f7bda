"""The in-tree filters the kube-scheduler stand-in runs before calling extenders (pure; no I/O).

Only the ones that matter for a simulated GPU cluster: NodeUnschedulable (``spec.unschedulable``),
NodeAffinity's ``nodeSelector`` part, TaintToleration for ``NoSchedule``/``NoExecute`` taints, and
NodeResourcesFit for the extended resources the caller names (:func:`insufficient`: allocatable
minus what pods already on the node request). CPU/memory fit is absent: simulated nodes have no
such pressure. Reasons use kube-scheduler's wording, and :func:`fit_error_message` aggregates
per-node reasons as its ``FitError`` does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from shared.kube_types import Node, Pod

UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
UNTOLERATED_TAINT = "node(s) had untolerated taint"
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

#: resource name -> whole units (extended resources are integers by API validation)
Amounts = dict[str, int]


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        key_matches = not toleration.get("key") or toleration.get("key") == taint.get("key")
        if toleration.get("operator") == "Exists":
            if key_matches:
                return True
        elif key_matches and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def node_rejects(pod: Pod, node: Node) -> str | None:
    """The reason ``node`` cannot take ``pod`` by the in-tree filters, or None if it can."""
    spec, node_spec = pod.get("spec") or {}, node.get("spec") or {}
    if node_spec.get("unschedulable"):
        return UNSCHEDULABLE
    labels = node.get("metadata", {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return SELECTOR_MISMATCH
    tolerations = spec.get("tolerations") or []
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in _BLOCKING_EFFECTS and not _tolerates(tolerations, taint):
            return UNTOLERATED_TAINT
    return None


def is_plain(node: Node) -> bool:
    """True when no node-side filter can reject anything here: schedulable, no blocking taint, so a
    pod without ``nodeSelector`` passes :func:`node_rejects` without being tested."""
    node_spec = node.get("spec") or {}
    return not node_spec.get("unschedulable") and not any(
        taint.get("effect") in _BLOCKING_EFFECTS for taint in node_spec.get("taints") or [])


def _units(quantity: Any) -> int:
    try:
        return int(str(quantity).strip())
    except ValueError:
        return 0  # not a whole number: the API server never stores one for an extended resource


def pod_requests(pod: Pod, names: frozenset[str]) -> Amounts:
    """What ``pod`` requests of ``names``, as kube-scheduler sums it: the containers' total or the
    largest init container, whichever is more (requests default to limits for extended resources)."""
    spec = pod.get("spec") or {}
    total: Amounts = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_requests(container, names).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_requests(container, names).items():
            total[name] = max(total.get(name, 0), amount)
    return {name: amount for name, amount in total.items() if amount > 0}


def _container_requests(container: Mapping[str, Any], names: frozenset[str]) -> Amounts:
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: _units(merged[name]) for name in names if name in merged}


def node_allocatable(node: Node, names: frozenset[str]) -> Amounts:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {name: _units(allocatable.get(name, 0)) for name in names}


def insufficient(requests: Amounts, allocatable: Amounts, used: Amounts) -> str | None:
    """NodeResourcesFit's ``Insufficient <resource>`` for the first resource that does not fit."""
    for name, amount in requests.items():
        if used.get(name, 0) + amount > allocatable.get(name, 0):
            return f"Insufficient {name}"
    return None


def fit_error_message(total_nodes: int, reasons: Mapping[str, str]) -> str:
    """``0/4 nodes are available: 1 node(s) were unschedulable, 3 insufficient GPU memory.``"""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    counts = Counter(reasons.values())
    summary = ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items()))
    return f"0/{total_nodes} nodes are available: {summary}."
