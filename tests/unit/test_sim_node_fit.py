"""In-tree filters of the kube-scheduler stand-in and its FitError message.

Resource fit cases: requests from limits or requests, summed over containers, the larger of that
and any init container; allocatable missing or not a whole number is 0; the first resource that
does not fit names the reason. ``is_plain`` agrees with ``node_rejects`` for selector-free pods.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpubus_local.sim.node_fit import (
    SELECTOR_MISMATCH,
    UNSCHEDULABLE,
    UNTOLERATED_TAINT,
    fit_error_message,
    insufficient,
    is_plain,
    node_allocatable,
    node_rejects,
    pod_requests,
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


GPU = "nvidia.com/gpu"
NAMES = frozenset({GPU})


def _container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}


@pytest.mark.parametrize(("spec", "expected"), [
    ({"containers": [_container({GPU: "2"})]}, {GPU: 2}),
    ({"containers": [_container({GPU: 2}, {GPU: "3"})]}, {GPU: 3}),
    ({"containers": [_container({GPU: "1"}), _container({GPU: "2"})]}, {GPU: 3}),
    ({"containers": [_container({GPU: "1"})], "initContainers": [_container({GPU: "4"})]}, {GPU: 4}),
    ({"containers": [_container({GPU: "3"})], "initContainers": [_container({GPU: "1"})]}, {GPU: 3}),
    ({"containers": [_container({"nvidia.com/gpumem": "4096"})]}, {}),
    ({"containers": [_container({GPU: "0"})]}, {}),
    ({}, {}),
])
def test_pod_requests_sum_containers_or_the_largest_init_container(
    spec: dict[str, Any], expected: dict[str, int]
) -> None:
    assert pod_requests({"spec": spec}, NAMES) == expected  # type: ignore[typeddict-item]


@pytest.mark.parametrize(("status", "expected"), [
    ({"allocatable": {GPU: "8"}}, 8),
    ({"allocatable": {GPU: "0"}}, 0),
    ({"allocatable": {}}, 0),
    ({}, 0),
    ({"allocatable": {GPU: "1.5"}}, 0),
])
def test_node_allocatable_missing_or_malformed_is_zero(status: dict[str, Any], expected: int) -> None:
    assert node_allocatable({"metadata": {"name": "n"}, "status": status}, NAMES) == {GPU: expected}  # type: ignore[typeddict-item]


@pytest.mark.parametrize(("requests", "allocatable", "used", "reason"), [
    ({GPU: 1}, {GPU: 8}, {}, None),
    ({GPU: 2}, {GPU: 8}, {GPU: 6}, None),
    ({GPU: 3}, {GPU: 8}, {GPU: 6}, f"Insufficient {GPU}"),
    ({GPU: 1}, {GPU: 0}, {}, f"Insufficient {GPU}"),
    ({}, {GPU: 0}, {}, None),
])
def test_insufficient_compares_used_plus_request_with_allocatable(
    requests: dict[str, int], allocatable: dict[str, int], used: dict[str, int], reason: str | None
) -> None:
    assert insufficient(requests, allocatable, used) == reason


@pytest.mark.parametrize("node_spec", [
    {}, {"unschedulable": True}, {"taints": [TAINT]}, {"taints": [{**TAINT, "effect": "PreferNoSchedule"}]},
])
def test_plain_nodes_are_exactly_those_that_reject_no_selector_free_pod(node_spec: dict[str, Any]) -> None:
    node = {"metadata": {"name": "n"}, "spec": node_spec}
    assert is_plain(node) == (node_rejects({"spec": {}}, node) is None)  # type: ignore[arg-type]
