"""In-tree filters of the kube-scheduler stand-in and its FitError message."""

from __future__ import annotations

from typing import Any

import pytest

from services.sim.node_fit import (
    SELECTOR_MISMATCH,
    UNSCHEDULABLE,
    UNTOLERATED_TAINT,
    fit_error_message,
    node_rejects,
)

TAINT = {"key": "gpu", "value": "busy", "effect": "NoSchedule"}


@pytest.mark.parametrize(("pod_spec", "node", "reason"), [
    ({}, {"metadata": {"name": "n"}}, None),
    ({}, {"metadata": {"name": "n"}, "spec": {"unschedulable": True}}, UNSCHEDULABLE),
    ({"nodeSelector": {"zone": "a"}}, {"metadata": {"name": "n", "labels": {"zone": "a"}}}, None),
    ({"nodeSelector": {"zone": "a"}}, {"metadata": {"name": "n", "labels": {"zone": "b"}}},
     SELECTOR_MISMATCH),
    ({}, {"metadata": {"name": "n"}, "spec": {"taints": [TAINT]}}, UNTOLERATED_TAINT),
    ({}, {"metadata": {"name": "n"}, "spec": {"taints": [{**TAINT, "effect": "PreferNoSchedule"}]}}, None),
    ({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, {"metadata": {"name": "n"},
                                                              "spec": {"taints": [TAINT]}}, None),
    ({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "busy", "effect": "NoSchedule"}]},
     {"metadata": {"name": "n"}, "spec": {"taints": [TAINT]}}, None),
    ({"tolerations": [{"key": "gpu", "operator": "Equal", "value": "idle"}]},
     {"metadata": {"name": "n"}, "spec": {"taints": [TAINT]}}, UNTOLERATED_TAINT),
    ({"tolerations": [{"operator": "Exists"}]}, {"metadata": {"name": "n"}, "spec": {"taints": [TAINT]}},
     None),
])
def test_node_rejects(pod_spec: dict[str, Any], node: dict[str, Any], reason: str | None) -> None:
    assert node_rejects({"spec": pod_spec}, node) == reason  # type: ignore[arg-type,typeddict-item]


def test_fit_error_message_counts_reasons_sorted() -> None:
    reasons = {"a": "insufficient GPU memory", "b": UNSCHEDULABLE, "c": "insufficient GPU memory"}
    assert fit_error_message(3, reasons) == ("0/3 nodes are available: 2 insufficient GPU memory, "
                                             "1 node(s) were unschedulable.")
    assert fit_error_message(0, {}) == "no nodes available to schedule pods"
