"""The simulated API server's pod update rule (``sim.pod_update``, the real ``ValidatePodUpdate``).

Case matrix:
- allowed: a container's or init container's image, ``activeDeadlineSeconds`` set or lowered, a
  toleration added, an existing toleration's ``tolerationSeconds``, a scheduling gate removed,
  ``terminationGracePeriodSeconds`` from negative to 1, a PUT leaving out defaulted fields (they are
  filled in and stored), zero values written out (``hostNetwork: false``), metadata only (same object);
- forbidden (422 ``Invalid``, ``Pod "p" is invalid: ...``, one cause per error): resources,
  ``nodeName`` set or changed, env, ``terminationGracePeriodSeconds`` otherwise, containers added or
  removed, an empty or padded image, ``activeDeadlineSeconds`` raised, removed or out of range, a
  toleration removed or changed, a scheduling gate added; several errors at once in brackets;
- a wrong JSON type in a field an update may change is the decoder's 400 before any rule, and is never
  stored: a gate or toleration that is not an object, a list that is not a list, a gate name that is
  not a string, a deadline or ``tolerationSeconds`` that is a fraction, a bool or a string.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.objects import default_pod
from gpubus_local.sim.pod_update import UPDATABLE, checked_update

GPU = {"limits": {"nvidia.com/gpu": "1"}}
OLD: dict[str, Any] = {
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "main", "image": "busybox:1", "resources": GPU,
                             "env": [{"name": "A", "value": "1"}]}],
             "initContainers": [{"name": "init", "image": "init:1"}],
             "schedulerName": "default-scheduler", "restartPolicy": "Always",
             "terminationGracePeriodSeconds": 30, "priority": 0, "activeDeadlineSeconds": 600,
             "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                              "tolerationSeconds": 60}],
             "schedulingGates": [{"name": "g1"}, {"name": "g2"}]},
    "status": {"phase": "Pending"},
}
FORBIDDEN = f"spec: Forbidden: pod updates may not change fields other than {UPDATABLE}"


def updated(**spec: Any) -> dict[str, Any]:
    new = copy.deepcopy(OLD)
    new["spec"].update(spec)
    return new


def main(**fields: Any) -> list[dict[str, Any]]:
    return [{**OLD["spec"]["containers"][0], **fields}]


def refusal(new: dict[str, Any], old: dict[str, Any] = OLD) -> ApiError:
    with pytest.raises(ApiError) as caught:
        checked_update(new, old)
    assert (caught.value.code, caught.value.reason) == (422, "Invalid")
    assert caught.value.details["kind"] == "Pod" and caught.value.details["name"] == "p"
    return caught.value


@pytest.mark.parametrize("new", [
    updated(containers=main(image="busybox:2")),
    updated(initContainers=[{"name": "init", "image": "init:2"}]),
    updated(activeDeadlineSeconds=300),
    updated(tolerations=[*OLD["spec"]["tolerations"], {"key": "gpu", "operator": "Exists"}]),
    updated(tolerations=[{**OLD["spec"]["tolerations"][0], "tolerationSeconds": 5}]),
    updated(schedulingGates=[{"name": "g2"}]),
    updated(schedulingGates=None),
    updated(hostNetwork=False, nodeSelector={}, volumes=[]),
], ids=["image", "init-image", "deadline-lowered", "toleration-added", "toleration-seconds", "gate-removed",
        "gates-removed", "zero-values"])
def test_allowed_changes_are_stored(new: dict[str, Any]) -> None:
    assert checked_update(new, OLD) is new


def test_a_deadline_may_be_set_where_there_was_none() -> None:
    old = copy.deepcopy(OLD)
    del old["spec"]["activeDeadlineSeconds"]
    new = updated(activeDeadlineSeconds=5)
    assert checked_update(new, old) is new


def test_a_negative_grace_period_may_become_one() -> None:
    old = updated(terminationGracePeriodSeconds=-1)
    new = updated(terminationGracePeriodSeconds=1)
    assert checked_update(new, old) is new


def test_a_put_leaving_out_defaulted_fields_changes_nothing_and_stores_them() -> None:
    new = copy.deepcopy(OLD)
    for key in ("schedulerName", "restartPolicy", "terminationGracePeriodSeconds", "priority"):
        del new["spec"][key]
    stored = checked_update(new, OLD)
    assert stored["spec"] == OLD["spec"]
    assert "schedulerName" not in new["spec"]


def test_metadata_only_updates_are_not_looked_at() -> None:
    new = {**OLD, "metadata": {**OLD["metadata"], "labels": {"a": "1"}}}
    assert checked_update(new, OLD) is new


@pytest.mark.parametrize("new", [
    updated(containers=main(resources={"limits": {"nvidia.com/gpu": "2"}})),
    updated(containers=main(resources=None)),
    updated(nodeName="node-1"),
    updated(containers=main(env=[{"name": "A", "value": "2"}])),
    updated(terminationGracePeriodSeconds=60),
    updated(schedulerName="other"),
    updated(hostNetwork=True),
], ids=["resources", "resources-removed", "node-name", "env", "grace-period", "scheduler-name",
        "host-network"])
def test_other_spec_changes_are_forbidden_with_the_real_message(new: dict[str, Any]) -> None:
    error = refusal(new)
    assert error.message.startswith(f'Pod "p" is invalid: {FORBIDDEN}\n')
    assert error.details["causes"] == [{"reason": "FieldValueForbidden", "field": "spec",
                                        "message": error.message.removeprefix('Pod "p" is invalid: spec: ')}]


def test_the_message_shows_what_changed() -> None:
    error = refusal(updated(nodeName="node-1"))
    assert error.message.endswith('\n  spec.nodeName: null -> "node-1"')


def test_a_node_name_set_by_binding_cannot_be_changed() -> None:
    bound = updated(nodeName="node-1")
    assert FORBIDDEN in refusal(updated(nodeName="node-2"), bound).message
    assert FORBIDDEN in refusal(updated(), bound).message


@pytest.mark.parametrize(("new", "text"), [
    (updated(containers=[*main(), {"name": "side", "image": "s"}]),
     "spec.containers: Forbidden: pod updates may not add or remove containers"),
    (updated(initContainers=[]),
     "spec.initContainers: Forbidden: pod updates may not add or remove containers"),
    (updated(initContainers=[{"name": "init"}]), "spec.initContainers[0].image: Required value"),
    (updated(containers=main(image=" busybox:2")),
     'spec.containers[0].image: Invalid value: " busybox:2": must not have leading or trailing whitespace'),
    (updated(activeDeadlineSeconds=601),
     "spec.activeDeadlineSeconds: Invalid value: 601: must be less than or equal to previous value"),
    (updated(activeDeadlineSeconds=-1),
     "spec.activeDeadlineSeconds: Invalid value: -1: must be between 0 and 2147483647, inclusive"),
    (updated(activeDeadlineSeconds=None),
     'spec.activeDeadlineSeconds: Invalid value: "null": must not update from a positive integer to nil '
     "value"),
    (updated(tolerations=[]),
     "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"),
    (updated(tolerations=[{**OLD["spec"]["tolerations"][0], "effect": "NoSchedule"}]),
     "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"),
    (updated(schedulingGates=[{"name": "g1"}, {"name": "g3"}]),
     "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new scheduling gate 'g3'"),
], ids=["container-added", "init-removed", "image-empty", "image-padded", "deadline-raised",
        "deadline-negative", "deadline-removed", "toleration-removed", "toleration-changed", "gate-added"])
def test_field_rules_name_the_field(new: dict[str, Any], text: str) -> None:
    error = refusal(new)
    assert error.message == f'Pod "p" is invalid: {text}'
    [cause] = error.details["causes"]
    assert f"{cause['field']}: {cause['message']}" == text


def test_several_errors_are_listed_together() -> None:
    error = refusal(updated(containers=main(image=""), nodeName="n"))
    both = f"[spec.containers[0].image: Required value, {FORBIDDEN}"
    assert error.message.startswith(f'Pod "p" is invalid: {both}')
    assert [c["field"] for c in error.details["causes"]] == ["spec.containers[0].image", "spec"]


def test_neither_pod_is_mutated() -> None:
    new = updated(containers=main(image="busybox:2"), schedulerName=None)
    before_new, before_old = copy.deepcopy(new), copy.deepcopy(OLD)
    checked_update(new, OLD)
    refusal(updated(nodeName="x"))
    assert (new, OLD) == (before_new, before_old)


def test_an_empty_default_field_is_defaulted_alike_on_create_and_update() -> None:
    """``schedulerName: ""`` is unset, as for Go's zero value: create fills it, so an image-only update
    of that pod changes nothing else (it was refused as schedulerName null -> default-scheduler)."""
    created = default_pod({"metadata": {"name": "p"}, "spec": {
        "schedulerName": "", "containers": [{"name": "main", "image": "a"}]}}, "default")
    assert created["spec"]["schedulerName"] == "default-scheduler"
    new = {**created, "spec": {**created["spec"], "containers": [{"name": "main", "image": "b"}]}}
    assert checked_update(new, created)["spec"]["containers"][0]["image"] == "b"


@pytest.mark.parametrize(("spec", "field", "go_type"), [
    ({"schedulingGates": ["g1"]}, "spec.schedulingGates", "v1.PodSchedulingGate"),
    ({"schedulingGates": [{"name": "g1"}, 5]}, "spec.schedulingGates", "v1.PodSchedulingGate"),
    ({"schedulingGates": "g1"}, "spec.schedulingGates", "[]v1.PodSchedulingGate"),
    ({"schedulingGates": [{"name": 1}]}, "spec.schedulingGates.name", "string"),
    ({"tolerations": ["k"]}, "spec.tolerations", "v1.Toleration"),
    ({"tolerations": {"key": "k"}}, "spec.tolerations", "[]v1.Toleration"),
    ({"tolerations": [{**OLD["spec"]["tolerations"][0], "tolerationSeconds": 1.5}]},
     "spec.tolerations.tolerationSeconds", "int64"),
    ({"activeDeadlineSeconds": 1.5}, "spec.activeDeadlineSeconds", "int64"),
    ({"activeDeadlineSeconds": 300.0}, "spec.activeDeadlineSeconds", "int64"),
    ({"activeDeadlineSeconds": True}, "spec.activeDeadlineSeconds", "int64"),
    ({"activeDeadlineSeconds": "300"}, "spec.activeDeadlineSeconds", "int64"),
])
def test_a_wrong_json_type_is_the_decoders_400_not_stored(spec: dict[str, Any], field: str, go_type: str
                                                          ) -> None:
    with pytest.raises(ApiError) as caught:
        checked_update(updated(**spec), OLD)
    assert (caught.value.code, caught.value.reason) == (400, "BadRequest")
    assert caught.value.message.startswith('Pod in version "v1" cannot be handled as a Pod: json: cannot '
                                           "unmarshal ")
    assert caught.value.message.endswith(f" into Go struct field Pod.{field} of type {go_type}")
