"""What a webhook's JSON patch wrote (``services.sim.admission.written``, ``union``), and the decoding of
the patched pod limited to it (``field_validation.decoded(touched=...)``).

Case matrix:
- ``written``: nothing for no op or a ``test``; the keys along an add, replace, remove or copy path
  (escaped tokens unescaped), and along a move's source too; a shorter path covers a longer one in
  either order; the empty path is the whole document;
- ``union``: of nothing, of the whole document, of overlapping trees;
- decoding: unknown fields under what was written are dropped, a written list is walked whole, and
  the parts not written are not walked (they were decoded before the webhook ran).
"""

from __future__ import annotations

from typing import Any

import pytest

from services.sim import field_validation
from services.sim.admission import union, written
from services.sim.field_validation import Directive, Touched


@pytest.mark.parametrize(("ops", "expected"), [
    ([], {}),
    ([{"op": "test", "path": "/spec", "value": {}}], {}),
    ([{"op": "add", "path": "/metadata/annotations/gpubus.io~1admitted", "value": "true"}],
     {"metadata": {"annotations": {"gpubus.io/admitted": True}}}),
    ([{"op": "replace", "path": "/spec/schedulerName", "value": "x"},
      {"op": "remove", "path": "/spec/containers/0/image"}],
     {"spec": {"schedulerName": True, "containers": {"0": {"image": True}}}}),
    ([{"op": "copy", "from": "/spec/containers/0", "path": "/spec/initContainers/0"}],
     {"spec": {"initContainers": {"0": True}}}),
    ([{"op": "move", "from": "/spec/containers", "path": "/metadata/containers"}],
     {"metadata": {"containers": True}, "spec": {"containers": True}}),
    ([{"op": "add", "path": "/spec", "value": {}}, {"op": "add", "path": "/spec/x", "value": 1}],
     {"spec": True}),
    ([{"op": "add", "path": "/spec/x", "value": 1}, {"op": "add", "path": "/spec", "value": {}}],
     {"spec": True}),
    ([{"op": "add", "path": "/spec/x", "value": 1}, {"op": "replace", "path": "", "value": {}}], True),
])
def test_written_is_every_path_a_patch_wrote_or_removed(ops: list[dict[str, Any]], expected: Touched) -> None:
    assert written(ops) == expected


@pytest.mark.parametrize(("a", "b", "expected"), [
    ({}, {}, {}),
    ({"spec": True}, True, True),
    ({"spec": {"x": True}}, {"spec": {"y": True}, "metadata": True},
     {"spec": {"x": True, "y": True}, "metadata": True}),
    ({"spec": {"x": True}}, {"spec": True}, {"spec": True}),
])
def test_union_is_what_two_patches_wrote_in_turn(a: Touched, b: Touched, expected: Touched) -> None:
    assert union(a, b) == expected


def test_only_what_was_written_is_decoded_and_a_written_list_whole() -> None:
    pod = {"metadata": {"name": "p", "stale": 1},
           "spec": {"containers": [{"name": "a", "image": "i", "x": 1}, {"name": "b", "image": "i", "y": 2}],
                    "schedulerName": "s", "z": 3}}
    touched = written([{"op": "add", "path": "/spec/containers/0/x", "value": 1},
                       {"op": "add", "path": "/spec/z", "value": 3}])
    decoded = field_validation.decoded("Pod", pod, Directive.IGNORE, touched=touched)
    assert decoded.obj == {"metadata": {"name": "p", "stale": 1},
                           "spec": {"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}],
                                    "schedulerName": "s"}}
    assert decoded.unknown == ("spec.containers[0].x", "spec.containers[1].y", "spec.z")


def test_the_whole_document_written_is_decoded_whole() -> None:
    pod = {"metadata": {"name": "p", "stale": 1}, "spec": {"containers": [], "z": 3}}
    decoded = field_validation.decoded("Pod", pod, Directive.IGNORE, touched=True)
    assert decoded.unknown == ("metadata.stale", "spec.z")
