"""The extender wire format: parsing kube-scheduler's PascalCase JSON and refusing bad bodies.

Matrix: NodeNames form, Nodes form, case-insensitive keys; body too large, not JSON, not an object,
missing pod, pod of the wrong type, NodeNames of the wrong type, Nodes without names, neither form;
binding args complete, missing or mistyped; filter replies in both forms.
"""

from __future__ import annotations

import orjson
import pytest

from services.scheduler.errors import ExtenderInputError
from services.scheduler.wire import (
    MAX_BODY_BYTES,
    BadRequestKind,
    filter_result,
    load_body,
    parse_binding_args,
    parse_extender_args,
)

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"}, "spec": {"containers": []}}


def test_node_names_form_is_parsed() -> None:
    args = parse_extender_args({"Pod": POD, "Nodes": None, "NodeNames": ["a", "b"]})
    assert args.node_names == ("a", "b") and args.nodes is None and args.pod == POD


def test_nodes_form_yields_the_item_names() -> None:
    nodes = {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    args = parse_extender_args({"Pod": POD, "Nodes": nodes})
    assert args.node_names == ("a", "b") and args.nodes == nodes


def test_keys_match_case_insensitively_like_go() -> None:
    args = parse_extender_args({"pod": POD, "nodenames": ["a"]})
    assert args.node_names == ("a",)


@pytest.mark.parametrize(
    ("body", "kind", "message"),
    [
        (b"x" * (MAX_BODY_BYTES + 1), BadRequestKind.TOO_LARGE, "exceeds the 1048576 byte (1 MiB) limit"),
        (b"{not json", BadRequestKind.NOT_JSON, "request body is not valid JSON"),
        (b"[1, 2]", BadRequestKind.NOT_OBJECT, "must be a JSON object, got list"),
    ],
)
def test_unusable_bodies_are_refused_with_their_kind(body: bytes, kind: str, message: str) -> None:
    with pytest.raises(ExtenderInputError) as e:
        load_body(body)
    assert e.value.kind == kind and message in str(e.value)


@pytest.mark.parametrize(
    ("args", "kind", "message"),
    [
        ({"NodeNames": ["a"]}, BadRequestKind.MISSING_POD, "extender args missing pod"),
        ({"Pod": "p", "NodeNames": ["a"]}, BadRequestKind.BAD_POD, "Pod must be a Kubernetes Pod object"),
        ({"Pod": POD, "NodeNames": "a"}, BadRequestKind.BAD_NODES, "NodeNames must be a list of strings"),
        ({"Pod": POD, "NodeNames": [1]}, BadRequestKind.BAD_NODES, "NodeNames must be a list of strings"),
        (
            {"Pod": POD, "Nodes": {"items": [{}]}},
            BadRequestKind.BAD_NODES,
            "Nodes.items[0] has no metadata.name",
        ),
        ({"Pod": POD, "Nodes": [1]}, BadRequestKind.BAD_NODES, "Nodes must be a NodeList with items"),
        ({"Pod": POD}, BadRequestKind.BAD_NODES, "neither NodeNames nor Nodes"),
    ],
)
def test_bad_extender_args_say_what_is_wrong(args: dict[str, object], kind: str, message: str) -> None:
    with pytest.raises(ExtenderInputError) as e:
        parse_extender_args(args)
    assert e.value.kind == kind and message in str(e.value)


def test_binding_args_are_parsed() -> None:
    b = parse_binding_args({"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n1"})
    assert (b.pod_name, b.pod_namespace, b.pod_uid, b.node) == ("p", "ns", "u", "n1")


@pytest.mark.parametrize(
    "args",
    [
        {"PodName": "p", "PodNamespace": "ns", "PodUID": "u"},
        {"PodName": "", "PodNamespace": "ns", "PodUID": "u", "Node": "n"},
        {"PodName": "p", "PodNamespace": "ns", "PodUID": 3, "Node": "n"},
    ],
)
def test_bad_binding_args_are_refused(args: dict[str, object]) -> None:
    with pytest.raises(ExtenderInputError) as e:
        parse_binding_args(args)
    assert e.value.kind == BadRequestKind.BAD_BINDING


def test_filter_reply_uses_pascal_case_and_the_request_form() -> None:
    names = filter_result(passed=["a"], failed={"b": "1/1 CardNotHealth"}, unresolvable={}, nodes=None)
    assert orjson.loads(orjson.dumps(names)) == {
        "Nodes": None,
        "NodeNames": ["a"],
        "FailedNodes": {"b": "1/1 CardNotHealth"},
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    nodes = {"kind": "NodeList", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    full = filter_result(passed=["b"], failed={}, unresolvable={"a": "node unregistered"}, nodes=nodes)
    assert full["NodeNames"] is None
    assert full["Nodes"] == {"kind": "NodeList", "items": [{"metadata": {"name": "b"}}]}
