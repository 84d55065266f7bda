"""Server-side field validation of the simulated API server (``gpubus_local.sim.field_validation``).

Case matrix:
- unknown fields found at every described level, in document order and the decoder's notation:
  top level, metadata, spec, a container (``resouces``, the GPU typo), an init container,
  ``resources``, node spec/status, namespace spec, quota spec, Event, Binding;
- accepted as they are: any key of a map (resource names, labels), anything inside an opaque type
  (env entries, affinity, container statuses, node info), anything but ``metadata`` in a kind
  without a table entry; every object the stand-in builds for itself has no unknown field;
- directives: empty -> Warn; Ignore/Warn/Strict; anything else (case matters) -> the real 422 naming
  CreateOptions/UpdateOptions/PatchOptions;
- Strict: create/update 400 ``<Kind> in version "v1" cannot be handled as a <Kind>: strict decoding
  error: unknown field "a", unknown field "b"``; patch 422 ``patch: Invalid value: <patch>: ...``
  with the patch as Go's ``%+v`` (strategic) or the patched JSON (merge, JSON patch);
- Warn: one ``299 - "unknown field \\"path\\""`` header value per field (deduplicated); Ignore: none;
- whatever the directive the result has no unknown field, the input is never mutated, and an object
  without unknown fields comes back as the very same object;
- Go formatting helpers: ``%q`` and ``%+v`` (floats as ``%v`` prints them).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from gpubus_local.sim import objects
from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_validation import Directive, decoded, directive, go_format, go_quote, warning

GPU = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}}


def pod(**container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "cuda", **container}]}}


def unknown(kind: str, obj: Any) -> tuple[str, ...]:
    return decoded(kind, obj, Directive.IGNORE).unknown


# -- where unknown fields are found -------------------------------------------------------------


def test_the_resouces_typo_is_an_unknown_field_and_never_stored() -> None:
    typo = pod(resouces=GPU)
    result = decoded("Pod", typo, Directive.WARN)
    assert result.unknown == ("spec.containers[0].resouces",)
    assert result.obj["spec"]["containers"] == [{"name": "c", "image": "cuda"}]
    assert typo["spec"]["containers"][0]["resouces"] == GPU  # the input is not mutated


@pytest.mark.parametrize(("kind", "obj", "paths"), [
    ("Pod", {**pod(), "specs": {}}, ["specs"]),
    ("Pod", {"metadata": {"name": "p", "label": {"a": "b"}}, "spec": {}}, ["metadata.label"]),
    ("Pod", {"spec": {"containers": [], "nodename": "n"}}, ["spec.nodename"]),
    ("Pod", pod(resources={"limit": {"nvidia.com/gpu": 1}}), ["spec.containers[0].resources.limit"]),
    ("Pod", {"spec": {"initContainers": [{"name": "i"}, {"name": "j", "imagePullPolicyy": "Always"}],
                      "containers": [{"name": "c", "Image": "x"}]}},
     ["spec.initContainers[1].imagePullPolicyy", "spec.containers[0].Image"]),
    ("Pod", {"status": {"phase": "Running", "hostIp": "1.2.3.4"}}, ["status.hostIp"]),
    ("Node", {"spec": {"unschedulabl": True}, "status": {"capacity": {}, "allocatables": {}}},
     ["spec.unschedulabl", "status.allocatables"]),
    ("Namespace", {"spec": {"finalizer": ["kubernetes"]}}, ["spec.finalizer"]),
    ("ResourceQuota", {"spec": {"hardd": {"limits.nvidia.com/gpumem": "1"}}}, ["spec.hardd"]),
    ("Event", {"involvedObject": {}, "reasons": "x"}, ["reasons"]),
    ("Binding", {"target": {"name": "n1"}, "targets": {}}, ["targets"]),
])
def test_unknown_fields_are_reported_in_document_order_with_their_paths(
    kind: str, obj: dict[str, Any], paths: list[str]
) -> None:
    assert unknown(kind, obj) == tuple(paths)


@pytest.mark.parametrize(("kind", "obj"), [
    ("Pod", pod(resources={"limits": {"nvidia.com/gpumem-percentage": 25, "example.com/anything": "1"},
                           "requests": {"cpu": "1"}, "claims": [{"name": "c", "whatever": 1}]})),
    ("Pod", pod(env=[{"name": "A", "valueFrom": {"any": {"thing": 1}}}], ports=[{"anything": 1}])),
    ("Pod", {"metadata": {"labels": {"any/key": "v"}, "annotations": {"nvidia.com/use-gputype": "A100"},
                          "ownerReferences": [{"future": True}]},
             "spec": {"affinity": {"nodeAffinity": {"x": 1}}, "tolerations": [{"y": 2}]},
             "status": {"containerStatuses": [{"imaginary": 1}], "conditions": [{"z": 3}]}}),
    ("Node", {"status": {"nodeInfo": {"brandNew": "1"}, "capacity": {"nvidia.com/gpu": "40"}}}),
    ("Widget", {"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "w"}, "size": 3,
                "spec": {"a": 1}}),
])
def test_what_the_table_does_not_describe_is_accepted_as_it_is(kind: str, obj: dict[str, Any]) -> None:
    result = decoded(kind, obj, Directive.STRICT)
    assert result.unknown == () and result.obj is obj


def test_a_kind_without_a_table_entry_still_has_its_metadata_checked() -> None:
    assert unknown("Widget", {"metadata": {"name": "w", "lables": {}}, "spec": {}}) == ("metadata.lables",)


def test_objects_the_stand_in_builds_itself_have_no_unknown_fields() -> None:
    built = objects.new_pod_status(objects.finish_create("pods", objects.default_pod(pod(resources=GPU),
                                                                                    "default"), "Pod"))
    assert unknown("Pod", built) == ()
    for namespace in SimApiServer().store.items("namespaces"):
        assert unknown("Namespace", namespace) == ()


def test_pruning_keeps_what_is_unchanged_and_copies_only_the_way_down() -> None:
    obj = {**pod(resouces=GPU), "status": {"phase": "Pending"}}
    before = copy.deepcopy(obj)
    kept = decoded("Pod", obj, Directive.IGNORE).obj
    assert obj == before
    assert kept is not obj and kept["spec"] is not obj["spec"]
    assert kept["metadata"] is obj["metadata"] and kept["status"] is obj["status"]


# -- directives and their errors ----------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (None, Directive.WARN), ("", Directive.WARN), ("Ignore", Directive.IGNORE), ("Warn", Directive.WARN),
    ("Strict", Directive.STRICT),
])
def test_the_directive_defaults_to_warn(value: str | None, expected: Directive) -> None:
    assert directive(value, "CreateOptions") is expected


@pytest.mark.parametrize("options", ["CreateOptions", "UpdateOptions", "PatchOptions"])
def test_an_unsupported_directive_is_the_real_422_on_the_options(options: str) -> None:
    with pytest.raises(ApiError) as e:
        directive("strict", options)
    supported = 'supported values: "", "Ignore", "Strict", "Warn"'
    assert e.value.code == 422 and e.value.reason == "Invalid"
    assert e.value.message == (f'{options}.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: '
                               f'"strict": {supported}')
    assert e.value.details == {"group": "meta.k8s.io", "kind": options, "causes": [
        {"reason": "FieldValueNotSupported", "message": f'Unsupported value: "strict": {supported}',
         "field": "fieldValidation"}]}


def test_strict_create_or_update_is_a_400_naming_every_unknown_field() -> None:
    obj = {**pod(resouces=GPU), "extra": 1}
    with pytest.raises(ApiError) as e:
        decoded("Pod", obj, Directive.STRICT)
    assert e.value.code == 400 and e.value.reason == "BadRequest"
    assert e.value.message == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                               'unknown field "spec.containers[0].resouces", unknown field "extra"')


def test_strict_strategic_patch_is_a_422_quoting_the_patch_as_go_prints_it() -> None:
    patch = {"spec": {"unschedulabl": True, "taints": [{"key": "a", "value": None}]}, "metadata": {"n": 1.5}}
    patched = {"kind": "Node", "metadata": {"name": "n1"}, "spec": {"unschedulabl": True}}
    with pytest.raises(ApiError) as e:
        decoded("Node", patched, Directive.STRICT, patch=patch, strategic=True)
    body = ('Invalid value: "map[metadata:map[n:1.5] spec:map[taints:[map[key:a value:<nil>]] '
            'unschedulabl:true]]": strict decoding error: unknown field "spec.unschedulabl"')
    assert e.value.code == 422 and e.value.reason == "Invalid"
    assert e.value.message == ' "" is invalid: patch: ' + body
    assert e.value.details == {"causes": [{"reason": "FieldValueInvalid", "message": body, "field": "patch"}]}


def test_strict_merge_or_json_patch_quotes_the_patched_object() -> None:
    patched = {"kind": "Node", "metadata": {"name": "n1"}, "spec": {"unschedulabl": True}}
    with pytest.raises(ApiError) as e:
        decoded("Node", patched, Directive.STRICT, patch=[{"op": "add"}])
    assert e.value.code == 422
    assert e.value.message == (' "" is invalid: patch: Invalid value: '
                               + go_quote(orjson.dumps(patched).decode())
                               + ': strict decoding error: unknown field "spec.unschedulabl"')


def test_warn_gives_one_warning_header_per_unknown_field() -> None:
    obj = {**pod(resouces=GPU), "metadata": {"name": "p", "x": 1}}
    result = decoded("Pod", obj, Directive.WARN)
    assert result.warnings == (r'299 - "unknown field \"metadata.x\""',
                               r'299 - "unknown field \"spec.containers[0].resouces\""')
    assert "x" not in result.obj["metadata"]


def test_ignore_drops_unknown_fields_silently() -> None:
    result = decoded("Pod", pod(resouces=GPU), Directive.IGNORE)
    assert result.warnings == () and "resouces" not in result.obj["spec"]["containers"][0]


def test_warnings_escape_quotes_and_backslashes_twice_as_go_does() -> None:
    assert warning('a"b\\c') == r'299 - "unknown field \"a\\\"b\\\\c\""'


# -- Go formatting --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "quoted"), [
    ("spec.x", '"spec.x"'), ('a"b', r'"a\"b"'), ("a\\b", r'"a\\b"'), ("tab\there", r'"tab\there"'),
    ("\x01", r'"\x01"'), ("grüße", '"grüße"'), ("\u200b", r'"\u200b"'),
])
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


@pytest.mark.parametrize(("value", "text"), [
    ({"b": [1, "x", None], "a": {"c": True}}, "map[a:map[c:true] b:[1 x <nil>]]"),
    ({}, "map[]"), ([], "[]"), (0.5, "0.5"), (3.0, "3"), (1e6, "1e+06"), (123456.0, "123456"),
    (1234567.5, "1.2345675e+06"), (1e-5, "1e-05"), (0.0001, "0.0001"), (-2.25, "-2.25"), (0.0, "0"),
    (False, "false"), (12345678901234, "12345678901234"),
])
def test_go_format(value: Any, text: str) -> None:
    assert go_format(value) == text
