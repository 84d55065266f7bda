"""RFC 6902 JSON Patch and RFC 7386 merge patch as the simulated API server applies them.

Case matrix: add (object member, whole map, array index, ``-``, escaped ``~1``/``~0`` keys),
replace, remove, test (pass/fail; JSON equality: false is not 0, 1 is 1.0), move, copy; failures
(missing parent, bad index, missing value, unknown op, non-array patch) raise PatchError naming the
operation and leave the input untouched, a later operation's failure too; merge patch (nested
merge, null deletes, scalars and arrays replace, input never mutated).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpubus_local.sim.errors import PatchError
from gpubus_local.sim.jsonpatch import apply_json_patch, json_equal, merge_patch

POD: dict[str, Any] = {"metadata": {"name": "p", "labels": {"a": "1"}},
                       "spec": {"containers": [{"name": "c0"}, {"name": "c1"}]}}


@pytest.mark.parametrize(("ops", "expected"), [
    ([{"op": "add", "path": "/metadata/annotations", "value": {"x": "1"}}],
     {**POD, "metadata": {**POD["metadata"], "annotations": {"x": "1"}}}),
    ([{"op": "add", "path": "/metadata/labels/hami.io~1vgpu", "value": "y"}],
     {**POD, "metadata": {"name": "p", "labels": {"a": "1", "hami.io/vgpu": "y"}}}),
    ([{"op": "add", "path": "/metadata/labels/t~0k", "value": "z"}],
     {**POD, "metadata": {"name": "p", "labels": {"a": "1", "t~k": "z"}}}),
    ([{"op": "add", "path": "/spec/containers/-", "value": {"name": "c2"}}],
     {**POD, "spec": {"containers": [{"name": "c0"}, {"name": "c1"}, {"name": "c2"}]}}),
    ([{"op": "add", "path": "/spec/containers/0", "value": {"name": "first"}}],
     {**POD, "spec": {"containers": [{"name": "first"}, {"name": "c0"}, {"name": "c1"}]}}),
    ([{"op": "replace", "path": "/metadata/name", "value": "q"}],
     {**POD, "metadata": {"name": "q", "labels": {"a": "1"}}}),
    ([{"op": "remove", "path": "/spec/containers/1"}], {**POD, "spec": {"containers": [{"name": "c0"}]}}),
    ([{"op": "test", "path": "/metadata/name", "value": "p"}, {"op": "remove", "path": "/metadata/labels"}],
     {**POD, "metadata": {"name": "p"}}),
    ([{"op": "move", "from": "/metadata/labels", "path": "/metadata/annotations"}],
     {**POD, "metadata": {"name": "p", "annotations": {"a": "1"}}}),
    ([{"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"}],
     {**POD, "metadata": {"name": "p", "labels": {"a": "1"}, "annotations": {"a": "1"}}}),
], ids=["add-map", "add-escaped-slash", "add-escaped-tilde", "append", "insert", "replace", "remove",
        "test-then-remove", "move", "copy"])
def test_operations_produce_the_rfc_result(ops: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(POD)
    assert apply_json_patch(POD, ops) == expected
    assert before == POD


@pytest.mark.parametrize("ops", [
    [{"op": "add", "path": "/metadata/annotations/x", "value": "1"}],
    [{"op": "replace", "path": "/spec/nodeName", "value": "n"}],
    [{"op": "remove", "path": "/spec/containers/5"}],
    [{"op": "add", "path": "/spec/containers/01", "value": {}}],
    [{"op": "test", "path": "/metadata/name", "value": "other"}],
    [{"op": "add", "path": "/metadata/x"}],
    [{"op": "frobnicate", "path": "/x", "value": 1}],
    [{"op": "add", "path": "no-slash", "value": 1}],
    [{"op": "move", "path": "/a"}],
    ["not an object"],
], ids=["missing-parent", "replace-missing", "index-out-of-range", "leading-zero", "test-fails", "no-value",
        "unknown-op", "bad-pointer", "move-without-from", "not-an-op"])
def test_invalid_operations_raise_and_leave_the_input_alone(ops: list[Any]) -> None:
    before = copy.deepcopy(POD)
    with pytest.raises(PatchError):
        apply_json_patch(POD, ops)
    assert before == POD


def test_a_later_operations_failure_names_it_and_undoes_the_earlier_ones() -> None:
    before = copy.deepcopy(POD)
    ops = [{"op": "add", "path": "/metadata/labels/b", "value": "2"},
           {"op": "remove", "path": "/spec/containers/0"},
           {"op": "test", "path": "/metadata/name", "value": "other"}]
    with pytest.raises(PatchError, match=r"^operation 2 \(test /metadata/name\): test failed"):
        apply_json_patch(POD, ops)
    assert before == POD


def test_a_patch_must_be_an_array() -> None:
    with pytest.raises(PatchError, match="array"):
        apply_json_patch(POD, {"op": "add"})


def test_pointers_unescape_in_rfc_order() -> None:
    doc = {"a/b": {"c~d": {"~1": "x"}}}
    assert apply_json_patch(doc, [{"op": "replace", "path": "/a~1b/c~0d/~01", "value": "y"}]) == {
        "a/b": {"c~d": {"~1": "y"}}}
    assert apply_json_patch(doc, [{"op": "add", "path": "", "value": [1]}]) == [1]  # "" is the whole document


def test_merge_patch_merges_deletes_and_replaces() -> None:
    target = {"metadata": {"annotations": {"keep": "1", "drop": "2"}}, "spec": {"list": [1, 2]}, "x": 1}
    patch = {"metadata": {"annotations": {"drop": None, "new": "3"}}, "spec": {"list": [3]}, "x": {"y": None}}
    assert merge_patch(target, patch) == {"metadata": {"annotations": {"keep": "1", "new": "3"}},
                                          "spec": {"list": [3]}, "x": {}}
    assert target["metadata"]["annotations"] == {"keep": "1", "drop": "2"}


def test_merge_patch_shares_untouched_subtrees() -> None:
    target = {"spec": {"big": {"k": "v"}}, "metadata": {"name": "a"}}
    result = merge_patch(target, {"metadata": {"labels": {"a": "b"}}})
    assert result["spec"] is target["spec"]


json_values = st.recursive(st.none() | st.integers() | st.text(max_size=3),
                           lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=3),
                           max_leaves=8)


@given(st.dictionaries(st.text(max_size=3), json_values, max_size=4))
def test_merge_patch_with_itself_is_idempotent(doc: dict[str, Any]) -> None:
    once = merge_patch({}, doc)
    assert merge_patch(once, doc) == once


@pytest.mark.parametrize(("a", "b", "equal"), [
    (0, False, False), (1, True, False), (False, False, True), (0, 0.0, True), (1, 1.5, False),
    ([0], [False], False), ({"a": 1}, {"a": True}, False), ({"a": [1, "x"]}, {"a": [1.0, "x"]}, True),
    ("1", 1, False), (None, None, True), (None, False, False), ({"a": 1}, {"a": 1, "b": 2}, False),
])
def test_json_equal_compares_json_values_not_python_ones(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal and json_equal(b, a) is equal


def test_a_test_op_for_false_fails_against_zero() -> None:
    with pytest.raises(PatchError, match="test failed"):
        apply_json_patch({"priority": 0}, [{"op": "test", "path": "/priority", "value": False}])
