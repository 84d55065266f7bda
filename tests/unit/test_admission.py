"""The admission core as a specification: HAMi's rules in HAMi's order, then gpubus's additions.

Case matrix (reference/hami-contract.md §5, §1):
- gate: not a CREATE / not a Pod, ``hami.io/webhook=ignore``, no containers, another scheduler
  (x forceOverwriteDefaultScheduler x --scheduler-name empty or set)
- per container: percentage range, priority env, core policy env, implied card count,
  exclusive ``gpucores: 100`` (count in limits/requests x percentage x gpumem), runtimeClassName,
  overwriteEnv
- pod: privileged, schedulerName rewrite, nodeName, invalid quantities, malformed pods
- patch shape: whole maps/lists added when absent, ``~1`` escaping, derived requests
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from admission_builders import apply_patch, container, env_of, limits_of, mutated, pod, request, run

from services.webhook import jsonpatch
from services.webhook.admission import AdmissionSettings, GpuCorePolicy, Outcome, admit
from shared.model import PERCENT_UNSET, ContainerRequest
from shared.requests import ResourceNames

GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"
PCT = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
PRIO = "nvidia.com/priority"


# --- the gate: which pods are looked at at all ---------------------------------------------


def test_pod_without_containers_is_denied() -> None:
    d = run(pod())
    assert (d.allowed, d.code, d.message, d.outcome) == (
        False,
        403,
        "pod has no containers",
        Outcome.NO_CONTAINERS,
    )


def test_update_operations_pass_untouched() -> None:
    d = run(pod(container(limits={GPU: 1})), operation="UPDATE")
    assert d.allowed and not d.patch and d.outcome is Outcome.NOT_OURS


def test_ignore_label_on_the_pod_skips_every_rule() -> None:
    obj = pod(container(limits={GPU: 1}, securityContext={"privileged": True}))
    obj["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    d = run(obj)
    assert d.allowed and not d.patch and d.outcome is Outcome.IGNORED


@pytest.mark.parametrize(
    ("pod_scheduler", "ours", "force", "taken"),
    [
        ("", "gpubus-scheduler", True, True),
        ("default-scheduler", "gpubus-scheduler", True, True),
        ("default-scheduler", "gpubus-scheduler", False, False),
        ("gpubus-scheduler", "gpubus-scheduler", False, True),
        ("volcano", "gpubus-scheduler", True, False),
        ("volcano", "", True, False),
    ],
)
def test_pods_of_another_scheduler_are_allowed_unchanged(
    pod_scheduler: str, ours: str, force: bool, taken: bool
) -> None:
    settings = AdmissionSettings(scheduler_name=ours, force_overwrite_default_scheduler=force)
    obj = (
        pod(container(limits={GPU: 1}), schedulerName=pod_scheduler)
        if pod_scheduler
        else pod(container(limits={GPU: 1}))
    )
    d = run(obj, settings)
    assert d.allowed
    if taken:
        assert d.outcome is Outcome.ADMITTED and d.scheduler_name == ours
    else:
        assert (d.outcome, d.patch, d.message) == (
            Outcome.OTHER_SCHEDULER,
            (),
            "pod already has different scheduler assigned",
        )


def test_empty_scheduler_name_setting_leaves_the_scheduler_alone() -> None:
    out = mutated(pod(container(limits={GPU: 1})), AdmissionSettings(scheduler_name=""))
    assert "schedulerName" not in out["spec"]
    assert limits_of(out)[CORES] == "100"


def test_gpu_pod_is_routed_to_the_gpubus_scheduler() -> None:
    out = mutated(pod(container(limits={GPU: 1}), schedulerName="default-scheduler"))
    assert out["spec"]["schedulerName"] == "gpubus-scheduler"


def test_pod_without_gpu_keeps_its_scheduler_and_gets_no_patch() -> None:
    d = run(pod(container(limits={"cpu": "1"}), schedulerName="default-scheduler"))
    assert d.allowed and d.patch == () and not d.gpu and d.requests == (None,)


# --- per container: HAMi MutateAdmission -----------------------------------------------------

#: (limits, requests, expected limits after admission, expected derived request)
COUNT_AND_EXCLUSIVE = [
    pytest.param(
        {GPU: 1},
        None,
        {GPU: 1, CORES: "100"},
        ContainerRequest(nums=1, mempercentagereq=100, coresreq=100),
        id="bare gpu:1 becomes exclusive",
    ),
    pytest.param(
        {GPU: "2", MEM: "4096"},
        None,
        {GPU: "2", MEM: "4096"},
        ContainerRequest(nums=2, memreq=4096, mempercentagereq=PERCENT_UNSET),
        id="gpumem means shareable",
    ),
    pytest.param(
        {GPU: 1, PCT: 100},
        None,
        {GPU: 1, PCT: 100, CORES: "100"},
        ContainerRequest(nums=1, mempercentagereq=100, coresreq=100),
        id="100 percent is the whole card",
    ),
    pytest.param(
        {GPU: 1, PCT: 50},
        None,
        {GPU: 1, PCT: 50},
        ContainerRequest(nums=1, mempercentagereq=50),
        id="50 percent is shareable",
    ),
    pytest.param(
        {GPU: 1, CORES: 30},
        None,
        {GPU: 1, CORES: 30},
        ContainerRequest(nums=1, mempercentagereq=100, coresreq=30),
        id="cores given are kept",
    ),
    pytest.param(
        {MEM: 2000},
        None,
        {MEM: 2000, GPU: "1"},
        ContainerRequest(nums=1, memreq=2000),
        id="gpumem without count implies one card",
    ),
    pytest.param(
        {CORES: 30},
        None,
        {CORES: 30, GPU: "1"},
        ContainerRequest(nums=1, mempercentagereq=100, coresreq=30),
        id="cores without count imply one card",
    ),
    pytest.param(
        {PCT: 50},
        None,
        {PCT: 50, GPU: "1"},
        ContainerRequest(nums=1, mempercentagereq=50),
        id="percentage without count implies one card",
    ),
    pytest.param(
        {MEM: 2000, PCT: 0},
        None,
        {MEM: 2000, PCT: 0, GPU: "1"},
        ContainerRequest(nums=1, memreq=2000),
        id="percentage 0 stays unset",
    ),
    pytest.param(
        None,
        {GPU: 1},
        {CORES: "100"},
        ContainerRequest(nums=1, mempercentagereq=100, coresreq=100),
        id="count in requests only still becomes exclusive",
    ),
]


@pytest.mark.parametrize(("limits", "requests", "want_limits", "want_request"), COUNT_AND_EXCLUSIVE)
def test_card_count_and_exclusive_cores(
    limits: dict[str, Any] | None,
    requests: dict[str, Any] | None,
    want_limits: dict[str, Any],
    want_request: ContainerRequest,
) -> None:
    obj = pod(container(limits=limits, requests=requests))
    d = run(obj)
    assert d.allowed and d.gpu
    assert limits_of(apply_patch(obj, d.patch)) == want_limits
    assert d.requests == (want_request,)


def test_default_gpu_num_zero_adds_no_count() -> None:
    settings = AdmissionSettings(names=ResourceNames(default_gpu_num=0))
    d = run(pod(container(limits={MEM: 2000})), settings)
    assert d.allowed and not d.gpu and d.patch == ()


def test_default_gpu_num_is_the_implied_count() -> None:
    settings = AdmissionSettings(names=ResourceNames(default_gpu_num=2))
    assert limits_of(mutated(pod(container(limits={MEM: 2000})), settings))[GPU] == "2"


def test_empty_memory_resource_name_makes_count_requests_exclusive() -> None:
    settings = AdmissionSettings(names=ResourceNames(memory=""))
    assert limits_of(mutated(pod(container(limits={GPU: 1, MEM: 100})), settings))[CORES] == "100"


def test_custom_resource_names_are_honoured() -> None:
    names = ResourceNames(count="hami.io/gpu", cores="hami.io/gpucores", memory="hami.io/gpumem")
    out = mutated(pod(container(limits={"hami.io/gpu": 1})), AdmissionSettings(names=names))
    assert limits_of(out) == {"hami.io/gpu": 1, "hami.io/gpucores": "100"}


@pytest.mark.parametrize("pct", [101, 150, -1])
def test_percentage_outside_0_to_100_is_refused_with_hamis_message(pct: int) -> None:
    """HAMi v2.10 ``pkg/device/nvidia/device.go`` ``validateMemoryPercentage`` words the message;
    ``pkg/scheduler/webhook.go`` answers it with ``admission.Errored(500)``. gpubus answers 400 on
    purpose (README, differences): the pod is at fault, not the webhook, and a 500 reads as an
    outage to users and alerting."""
    d = run(pod(container("train", limits={GPU: 1, PCT: pct})))
    assert not d.allowed and d.code == 400
    assert d.message == (
        f"invalid nvidia.com/gpumem-percentage value {pct} in container train: "
        "must be an integer between 0 and 100"
    )


def test_percentage_over_100_in_an_init_container_is_refused_too() -> None:
    """HAMi's webhook runs the same check over init containers first (webhook.go)."""
    obj = pod(container("main", limits={GPU: 1}))
    obj["spec"]["initContainers"] = [container("setup", limits={GPU: 1, PCT: 101})]
    d = run(obj)
    assert (d.allowed, d.code) == (False, 400)
    assert "in container setup:" in d.message


def test_priority_becomes_cuda_task_priority() -> None:
    out = mutated(pod(container(limits={GPU: 1, PRIO: 0})))
    assert out["spec"]["containers"][0]["env"] == [{"name": "CUDA_TASK_PRIORITY", "value": "0"}]


def test_priority_is_appended_to_an_existing_env_list() -> None:
    obj = pod(container(limits={GPU: 1, PRIO: "1"}, env=[{"name": "A", "value": "a"}]))
    d = run(obj)
    assert {
        "op": "add",
        "path": "/spec/containers/0/env/1",
        "value": {"name": "CUDA_TASK_PRIORITY", "value": "1"},
    } in d.patch
    assert env_of(apply_patch(obj, d.patch)) == {"A": "a", "CUDA_TASK_PRIORITY": "1"}


def test_priority_set_by_the_user_is_replaced_by_the_resource_value() -> None:
    obj = pod(container(limits={GPU: 1, PRIO: 1}, env=[{"name": "CUDA_TASK_PRIORITY", "value": "0"}]))
    assert env_of(mutated(obj)) == {"CUDA_TASK_PRIORITY": "1"}


@pytest.mark.parametrize("policy", [GpuCorePolicy.FORCE, GpuCorePolicy.DISABLE])
def test_core_policy_env_goes_on_every_container_gpu_or_not(policy: GpuCorePolicy) -> None:
    obj = pod(container("gpu", limits={GPU: 1}), container("side"), init=[container("init")])
    out = mutated(obj, AdmissionSettings(gpu_core_policy=policy))
    for key, i in (("initContainers", 0), ("containers", 0), ("containers", 1)):
        assert env_of(out, i, key)["GPU_CORE_UTILIZATION_POLICY"] == policy.value


def test_default_core_policy_injects_nothing() -> None:
    assert "env" not in mutated(pod(container(limits={GPU: 1})))["spec"]["containers"][0]


def test_overwrite_env_hides_gpus_from_containers_without_a_gpu() -> None:
    obj = pod(
        container("gpu", limits={GPU: 1}),
        container("side", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
    )
    out = mutated(obj, AdmissionSettings(overwrite_env=True))
    assert "env" not in out["spec"]["containers"][0]
    assert env_of(out, 1) == {"NVIDIA_VISIBLE_DEVICES": "none"}


def test_runtime_class_is_set_on_gpu_pods_that_have_none() -> None:
    settings = AdmissionSettings(runtime_class_name="nvidia")
    assert mutated(pod(container(limits={GPU: 1})), settings)["spec"]["runtimeClassName"] == "nvidia"
    kept = mutated(pod(container(limits={GPU: 1}), runtimeClassName="kata"), settings)
    assert kept["spec"]["runtimeClassName"] == "kata"
    assert "runtimeClassName" not in mutated(pod(container()), settings)["spec"]


# --- pod-level rules -------------------------------------------------------------------------


def test_privileged_gpu_container_is_denied() -> None:
    d = run(pod(container("train", limits={GPU: 1}, securityContext={"privileged": True})))
    assert (d.allowed, d.code, d.message) == (False, 403, "container train is privileged")


def test_privileged_sidecar_of_a_gpu_pod_is_denied() -> None:
    obj = pod(container("train", limits={GPU: 1}), container("debug", securityContext={"privileged": True}))
    assert run(obj).message == "container debug is privileged"


def test_privileged_pod_without_gpu_is_not_ours() -> None:
    assert run(pod(container(securityContext={"privileged": True}))).allowed


def test_gpu_pod_with_a_node_assigned_is_denied() -> None:
    d = run(pod(container(limits={GPU: 1}), nodeName="node-1"))
    assert (d.allowed, d.message, d.outcome) == (False, "pod has node assigned", Outcome.NODE_ASSIGNED)


def test_pod_without_gpu_may_name_its_node() -> None:
    assert run(pod(container(), nodeName="node-1")).allowed


def test_a_preset_node_is_only_refused_when_the_webhook_reroutes_the_pod() -> None:
    keep = AdmissionSettings(scheduler_name="")
    d = run(pod(container(limits={GPU: 1}), nodeName="node-1"), keep)
    assert (d.allowed, d.outcome, d.mutations) == (
        True,
        Outcome.ADMITTED,
        ("/spec/containers/0/resources/limits/nvidia.com~1gpucores",),
    )


def test_gpu_container_after_a_plain_one_is_mutated_in_its_own_slot() -> None:
    obj = pod(container("proxy"), container("train", limits={GPU: 1}), container("log"))
    d = run(obj)
    out = apply_patch(obj, d.patch)
    assert limits_of(out, 0) == {} and limits_of(out, 2) == {}
    assert limits_of(out, 1) == {GPU: 1, CORES: "100"}
    assert d.requests == (None, ContainerRequest(nums=1, memreq=0, mempercentagereq=100, coresreq=100), None)


@pytest.mark.parametrize(
    ("limits", "resource"),
    [
        ({GPU: 1, MEM: "16Gi"}, MEM),
        ({GPU: "1.5"}, GPU),
        ({GPU: 1, CORES: "x"}, CORES),
        ({GPU: 1, PRIO: "high"}, PRIO),
        ({GPU: 1, MEM: -5}, MEM),
        ({GPU: 1, PCT: "50.5"}, PCT),
    ],
)
def test_invalid_quantities_are_denied_naming_container_and_resource(
    limits: dict[str, Any], resource: str
) -> None:
    d = run(pod(container("train", limits=limits)))
    assert not d.allowed and d.code == 400 and d.outcome is Outcome.INVALID_QUANTITY
    assert "train" in d.message and resource in d.message


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": "nope"},
        {"containers": [{"name": "c", "resources": {"limits": "x"}}]},
        {"containers": [{"name": "c", "env": {"A": "b"}}]},
        {"containers": [{"name": "c"}], "initContainers": [3]},
    ],
)
def test_malformed_pods_are_denied_not_crashed(spec: dict[str, Any]) -> None:
    d = run({"metadata": {"name": "p"}, "spec": spec}, AdmissionSettings(overwrite_env=True))
    assert not d.allowed and d.code == 400 and d.outcome is Outcome.MALFORMED_POD


# --- patch shape --------------------------------------------------------------------------


def test_absent_limits_map_is_added_whole() -> None:
    d = run(pod(container(requests={GPU: 1})))
    assert {"op": "add", "path": "/spec/containers/0/resources/limits", "value": {CORES: "100"}} in d.patch


def test_absent_env_list_is_added_whole() -> None:
    d = run(pod(container(limits={GPU: 1}), container("side")), AdmissionSettings(overwrite_env=True))
    assert {
        "op": "add",
        "path": "/spec/containers/1/env",
        "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}],
    } in d.patch


def test_resource_names_are_escaped_in_patch_paths() -> None:
    d = run(pod(container(limits={GPU: 1})))
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
        "value": "100",
    } in d.patch


def test_pointer_escaping_handles_tilde_and_slash() -> None:
    assert jsonpatch.escape("a~b/c") == "a~0b~1c"
    ops = jsonpatch.diff({"m": {}}, {"m": {"x~/y": 1}})
    assert ops == [{"op": "add", "path": "/m/x~0~1y", "value": 1}]
    assert apply_patch({"m": {}}, ops) == {"m": {"x~/y": 1}}


def test_init_containers_come_first_in_the_derived_requests() -> None:
    obj = pod(
        container("app", limits={GPU: 2, MEM: 1000}),
        container("side"),
        init=[container("warm", limits={GPU: 1, MEM: 500})],
    )
    d = run(obj)
    assert d.requests == (
        ContainerRequest(nums=1, memreq=500),
        ContainerRequest(nums=2, memreq=1000),
        None,
    )


def test_settings_are_plain_values() -> None:
    s = replace(AdmissionSettings(), overwrite_env=True)
    assert s.overwrite_env and s.scheduler_name == "gpubus-scheduler"


def test_reviews_of_other_kinds_pass_untouched() -> None:
    req = request(pod(container(limits={GPU: 1})))
    req["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    d = admit(req, AdmissionSettings())
    assert d.allowed and d.patch == () and d.outcome is Outcome.NOT_OURS
