"""Field and label selectors of the simulated API server.

Case matrix: field ``=``/``==``/``!=``, commas AND, missing field = "", unsupported field -> 400,
malformed term -> 400; label ``=``/``==``/``!=``, ``in``/``notin`` (commas inside parentheses),
exists/``!``; structured selectors (matchLabels, In/NotIn/Exists/DoesNotExist, unknown op).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.selectors import parse_field_selector, parse_label_selector, structured_selector_matches

BOUND: dict[str, Any] = {"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "x", "tier": "gpu"}},
                         "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
PENDING: dict[str, Any] = {"metadata": {"name": "b", "namespace": "ns"}, "spec": {},
                           "status": {"phase": "Pending"}}


@pytest.mark.parametrize(("selector", "bound", "pending"), [
    ("spec.nodeName=n1", True, False),
    ("spec.nodeName==n1", True, False),
    ("spec.nodeName!=n1", False, True),
    ("spec.nodeName=", False, True),
    ("spec.nodeName=n1,status.phase=Running", True, False),
    ("spec.nodeName!=,status.phase!=Succeeded", True, False),
    ("metadata.name=b", False, True),
    ("", True, True),
])
def test_field_selector_matches(selector: str, bound: bool, pending: bool) -> None:
    match, _ = parse_field_selector("pods", selector)
    assert (match(BOUND), match(PENDING)) == (bound, pending)


def test_field_selector_reports_equalities_for_indexing() -> None:
    _, equals = parse_field_selector("pods", "spec.nodeName=n1,status.phase!=Failed")
    assert equals == {"spec.nodeName": "n1"}


@pytest.mark.parametrize("selector", ["spec.image=x", "spec.nodeName", "=x"])
def test_bad_field_selectors_are_a_400(selector: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_field_selector("pods", selector)
    assert info.value.code == 400


@pytest.mark.parametrize(("selector", "bound", "pending"), [
    ("app=x", True, False),
    ("app==x", True, False),
    ("app!=x", False, True),
    ("app in (x, y)", True, False),
    ("app notin (x,y)", False, True),
    ("tier", True, False),
    ("!tier", False, True),
    ("app in (x,y),tier=gpu", True, False),
    ("app in (y),tier=gpu", False, False),
])
def test_label_selector_matches(selector: str, bound: bool, pending: bool) -> None:
    match = parse_label_selector(selector)
    assert (match(BOUND), match(PENDING)) == (bound, pending)


def test_unparseable_label_selector_is_a_400() -> None:
    with pytest.raises(ApiError) as info:
        parse_label_selector("app ~ x")
    assert info.value.code == 400


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    (None, {}, True),
    ({}, {"a": "b"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "b"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "c"}, False),
    ({"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]}, {}, True),
    ({"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]},
     {"hami.io/webhook": "ignore"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
])
def test_structured_selector(selector: dict[str, Any] | None, labels: dict[str, str], matches: bool) -> None:
    assert structured_selector_matches(selector, labels) is matches


def test_structured_selector_unknown_operator_is_a_400() -> None:
    with pytest.raises(ApiError):
        structured_selector_matches({"matchExpressions": [{"key": "a", "operator": "Gt"}]}, {})


EVENT: dict[str, Any] = {
    "metadata": {"name": "p.1", "namespace": "ns"}, "reason": "FailedScheduling", "type": "Warning",
    "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u-1", "apiVersion": "v1",
                       "fieldPath": "spec.containers{main}"},
    "source": {"component": "gpubus-scheduler"}, "reportingComponent": "gpubus-scheduler"}


@pytest.mark.parametrize(("selector", "matches"), [
    ("involvedObject.name=p,involvedObject.namespace=ns,involvedObject.uid=u-1", True),  # kubectl describe
    ("involvedObject.kind=Pod,involvedObject.uid=u-2", False),
    ("involvedObject.fieldPath=spec.containers{main}", True),
    ("type=Warning,reason=FailedScheduling", True),
    ("type!=Warning", False),
    ("source=gpubus-scheduler", True),
    ("reportingComponent=gpubus-scheduler,metadata.name=p.1", True),
])
def test_event_field_selectors(selector: str, matches: bool) -> None:
    match, _ = parse_field_selector("events", selector)
    assert match(EVENT) is matches


def test_an_events_source_is_its_reporting_component_when_it_has_no_source() -> None:
    match, _ = parse_field_selector("events", "source=default-scheduler")
    assert match({"source": {}, "reportingComponent": "default-scheduler"})
    assert not match({"source": {"component": "kubelet"}, "reportingComponent": "default-scheduler"})


def test_an_event_field_the_registry_does_not_select_is_a_400() -> None:
    with pytest.raises(ApiError) as info:
        parse_field_selector("events", "message=x")
    assert info.value.code == 400 and "field label not supported: message" in info.value.message
