"""Whether a node the API server shows may take a pod, by the node-side checks kube-scheduler runs
before the extender (pure; no I/O).

/bind must not trust that /filter was asked first, nor that the pod it names is the one filter saw:
it re-checks the pod (read from the API server) against the node's labels, taints and
``spec.unschedulable`` as the watch last saw them. Covered: NodeUnschedulable, ``nodeSelector``,
required node affinity (``matchExpressions`` In/NotIn/Exists/DoesNotExist/Gt/Lt and
``matchFields`` on ``metadata.name``), TaintToleration for NoSchedule/NoExecute. The card's room is
Fit's job, not this module's. Must not know HTTP, NATS or the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.model import NodeName

UNSCHEDULABLE = "node is unschedulable"
SELECTOR_MISMATCH = "node does not match the pod's nodeSelector"
AFFINITY_MISMATCH = "node does not match the pod's required node affinity"
UNTOLERATED_TAINT = "node has a taint the pod does not tolerate"
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFacts:
    """What the node-side checks read of a Node object."""

    name: NodeName
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...] = ()
    unschedulable: bool = False

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> NodeFacts:
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        labels = meta.get("labels") or {}
        taints = spec.get("taints") or []
        if not isinstance(labels, Mapping):
            labels = {}
        if not isinstance(taints, list):
            taints = []
        return cls(name=NodeName(str(meta.get("name") or "")),
                   labels={str(k): str(v) for k, v in labels.items()},
                   taints=tuple(t for t in taints if isinstance(t, Mapping)),
                   unschedulable=bool(spec.get("unschedulable")))


def tolerates(tolerations: Sequence[Any], taint: Mapping[str, Any]) -> bool:
    """True when one toleration matches the taint (kube's ToleratesTaint)."""
    for toleration in tolerations:
        if not isinstance(toleration, Mapping):
            continue
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        key_matches = not toleration.get("key") or toleration.get("key") == taint.get("key")
        if toleration.get("operator") == "Exists":
            if key_matches:
                return True
        elif key_matches and toleration.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _expression_matches(expression: Any, values_of: Mapping[str, str]) -> bool:
    if not isinstance(expression, Mapping):
        return False
    key, op = str(expression.get("key", "")), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present, value = key in values_of, values_of.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and len(values) == 1:
        have, bound = _number(value), _number(values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term_matches(term: Any, facts: NodeFacts) -> bool:
    """A nodeSelectorTerm: all its expressions and fields hold (an empty term matches nothing)."""
    if not isinstance(term, Mapping):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(_expression_matches(e, facts.labels) for e in expressions)
            and all(_expression_matches(f, {"metadata.name": facts.name}) for f in fields))


def node_rejects(pod: Mapping[str, Any], facts: NodeFacts) -> str | None:
    """Why the node cannot take the pod by the node-side checks, or None if it can."""
    spec = pod.get("spec") or {}
    if facts.unschedulable and not any(
            tolerates([t], {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            for t in spec.get("tolerations") or []):
        return UNSCHEDULABLE
    for key, value in (spec.get("nodeSelector") or {}).items():
        if facts.labels.get(key) != value:
            return SELECTOR_MISMATCH
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if terms and not any(_term_matches(term, facts) for term in terms):
        return AFFINITY_MISMATCH
    tolerations = spec.get("tolerations") or []
    for taint in facts.taints:
        if taint.get("effect") in _BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            return UNTOLERATED_TAINT
    return None


class NodeBook:
    """The Node objects the scheduler's node watch last saw, as :class:`NodeFacts` (in memory)."""

    def __init__(self) -> None:
        self._nodes: dict[NodeName, NodeFacts] = {}

    def put(self, node: Mapping[str, Any]) -> None:
        facts = NodeFacts.of(node)
        if facts.name:
            self._nodes[facts.name] = facts

    def remove(self, name: NodeName) -> None:
        self._nodes.pop(name, None)

    def get(self, name: NodeName) -> NodeFacts | None:
        return self._nodes.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes
