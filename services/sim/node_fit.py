"""The in-tree filters the kube-scheduler stand-in runs before calling extenders (pure; no I/O).

Only the ones that matter for a simulated GPU cluster: NodeUnschedulable (``spec.unschedulable``),
NodeAffinity's ``nodeSelector`` part, and TaintToleration for ``NoSchedule``/``NoExecute`` taints.
Resource fit is deliberately absent: GPU resources are the extender's (``ignoredByScheduler``) and
simulated nodes have no CPU/memory pressure. Reasons use kube-scheduler's wording, and
:func:`fit_error_message` aggregates per-node reasons as its ``FitError`` does.
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


def fit_error_message(total_nodes: int, reasons: Mapping[str, str]) -> str:
    """``0/4 nodes are available: 1 node(s) were unschedulable, 3 insufficient GPU memory.``"""
    if total_nodes == 0:
        return "no nodes available to schedule pods"
    counts = Counter(reasons.values())
    summary = ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items()))
    return f"0/{total_nodes} nodes are available: {summary}."
