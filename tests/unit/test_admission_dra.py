"""DRA mode's admission: HAMi's GPU limits translated into ResourceClaims (services/webhook/claims.py).

Case matrix:
- shapes: count x gpumem (x memoryFactor) / gpumem-percentage 100 / none (whole card) x gpucores
  (given / exclusive 100 added / default) -> one template per shape, named after it
- several cards: distinct cards (distinctAttribute on the uuid)
- containers: app and init containers each their own claim; two containers of one shape share a
  template; a container without GPU untouched; existing pod claims kept, names not reused
- removed: count, memory, percentage, cores, priority limits and requests; other resources kept;
  CUDA_TASK_PRIORITY env still set
- selectors: use/nouse-gputype (whole tokens, case-insensitive), use/nouse-gpuuuid
- refused: percentage below 100, a bad type or uuid annotation, a preset nodeName
- schedulerName left to kube-scheduler; admitting the admitted pod changes nothing;
  extender mode unchanged
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from admission_builders import apply_patch, container, pod, run

from services.webhook.admission import AdmissionSettings, Outcome
from services.webhook.claims import SHAPE_ANNOTATION, ClaimSettings, selectors
from shared.requests import ResourceNames

GPU, MEM, PCT, CORES, PRIO = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                              "nvidia.com/gpucores", "nvidia.com/priority")
DRA = AdmissionSettings(claims=ClaimSettings())


def admitted(obj: dict[str, Any], settings: AdmissionSettings = DRA) -> tuple[dict[str, Any], Any]:
    decision = run(obj, settings)
    assert decision.allowed, decision.message
    return apply_patch(obj, decision.patch), decision


def exactly(template: Any) -> dict[str, Any]:
    [request] = template.body["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpu"
    return dict(request["exactly"])


@pytest.mark.parametrize(("limits", "name", "capacity"), [
    ({GPU: 1, MEM: 3000, CORES: 30}, "gpubus-1x3000mi-30c", {"memory": "3000Mi", "cores": "30"}),
    ({MEM: "3000"}, "gpubus-1x3000mi-0c", {"memory": "3000Mi", "cores": "0"}),
    ({GPU: 1}, "gpubus-1xwhole-100c", {"cores": "100"}),
    ({GPU: 1, PCT: 100, CORES: 50}, "gpubus-1xwhole-50c", {"cores": "50"}),
    ({GPU: 2, MEM: 1024, CORES: 10}, "gpubus-2x1024mi-10c", {"memory": "1024Mi", "cores": "10"}),
])
def test_limits_become_a_claim_of_their_shape(limits: dict[str, Any], name: str,
                                              capacity: dict[str, str]) -> None:
    out, decision = admitted(pod(container(limits=limits)))
    [template] = decision.templates
    assert (template.namespace, template.name) == ("ns", name)
    assert template.body["metadata"]["annotations"][SHAPE_ANNOTATION] == template.digest
    got = exactly(template)
    assert got["deviceClassName"] == "gpubus.io" and got["count"] == limits.get(GPU, 1)
    assert got["capacity"] == {"requests": capacity}
    assert out["spec"]["resourceClaims"] == [{"name": "gpubus-0", "resourceClaimTemplateName": name}]
    [c] = out["spec"]["containers"]
    assert c["resources"] == {"claims": [{"name": "gpubus-0"}]}
    assert "schedulerName" not in out["spec"]
    assert decision.requests[0] is not None and decision.requests[0].nums == limits.get(GPU, 1)


def test_several_cards_must_be_distinct() -> None:
    _, decision = admitted(pod(container(limits={GPU: 2, MEM: 1000})))
    constraints = decision.templates[0].body["spec"]["spec"]["devices"]["constraints"]
    assert constraints == [{"requests": ["gpu"], "distinctAttribute": "gpubus.io/uuid"}]
    _, one = admitted(pod(container(limits={GPU: 1, MEM: 1000})))
    assert "constraints" not in one.templates[0].body["spec"]["spec"]["devices"]


def test_memory_factor_scales_the_claim() -> None:
    s = AdmissionSettings(claims=ClaimSettings(), names=ResourceNames(memory_factor=1024))
    _, decision = admitted(pod(container(limits={GPU: 1, MEM: 2})), s)
    assert exactly(decision.templates[0])["capacity"]["requests"]["memory"] == "2048Mi"


def test_each_gpu_container_gets_its_claim_and_others_are_left_alone() -> None:
    shared = {GPU: 1, MEM: 1000, CORES: 20}
    obj = pod(container("a", limits=shared), container("cpu", limits={"cpu": "1"}),
              container("b", limits={**shared, "memory": "1Gi"}, requests={"cpu": "100m", MEM: 1000}),
              init=[container("warm", limits={GPU: 1, MEM: 500})],
              resourceClaims=[{"name": "gpubus-0", "resourceClaimName": "mine"}])
    out, decision = admitted(obj)
    assert [t.name for t in decision.templates] == ["gpubus-1x500mi-0c", "gpubus-1x1000mi-20c"]
    assert out["spec"]["resourceClaims"] == [
        {"name": "gpubus-0", "resourceClaimName": "mine"},
        {"name": "gpubus-0-1", "resourceClaimTemplateName": "gpubus-1x500mi-0c"},
        {"name": "gpubus-1", "resourceClaimTemplateName": "gpubus-1x1000mi-20c"},
        {"name": "gpubus-2", "resourceClaimTemplateName": "gpubus-1x1000mi-20c"}]
    init, (a, cpu, b) = out["spec"]["initContainers"][0], out["spec"]["containers"]
    assert init["resources"] == {"claims": [{"name": "gpubus-0-1"}]}
    assert a["resources"] == {"claims": [{"name": "gpubus-1"}]}
    assert cpu["resources"] == {"limits": {"cpu": "1"}}
    assert b["resources"] == {"limits": {"memory": "1Gi"}, "requests": {"cpu": "100m"},
                              "claims": [{"name": "gpubus-2"}]}


def test_priority_becomes_env_only() -> None:
    out, _ = admitted(pod(container(limits={GPU: 1, MEM: 1000, PRIO: 1})))
    [c] = out["spec"]["containers"]
    assert {"name": "CUDA_TASK_PRIORITY", "value": "1"} in c["env"]
    assert "limits" not in c["resources"]


def _annotated(annotations: dict[str, str]) -> dict[str, Any]:
    obj = pod(container(limits={GPU: 1, MEM: 1000}))
    obj["metadata"]["annotations"] = annotations
    return obj


def test_card_annotations_become_selectors_in_the_template() -> None:
    _, decision = admitted(_annotated({"nvidia.com/use-gputype": "A10,h100",
                                       "nvidia.com/nouse-gpuuuid": "GPU-1234-ab"}))
    [template] = decision.templates
    assert re.fullmatch(r"gpubus-1x1000mi-0c-[0-9a-f]{10}", template.name)
    exprs = [s["cel"]["expression"] for s in exactly(template)["selectors"]]
    assert exprs == [
        'device.attributes["gpubus.io"].productName.matches("(?i)(^|[-_ ])A10([-_ ]|$)")'
        ' || device.attributes["gpubus.io"].productName.matches("(?i)(^|[-_ ])h100([-_ ]|$)")',
        '!(device.attributes["gpubus.io"].uuid in ["GPU-1234-ab"])']


@pytest.mark.parametrize(("wanted", "product", "match"), [
    ("A10", "NVIDIA-A10", True), ("A10", "NVIDIA-A100-80GB", False), ("a100", "NVIDIA-A100-80GB", True),
    ("A100-80GB", "NVIDIA-A100-80GB", True), ("A100 80GB", "NVIDIA-A100-80GB", True),
    ("H100", "NVIDIA-A100", False), ("2.0", "X-2.0", True), ("2.0", "X-2x0", False),
])
def test_type_selectors_match_whole_tokens(wanted: str, product: str, match: bool) -> None:
    """The RE2 in the selector (Python's re agrees on this subset) as extender mode's type match."""
    [expr] = selectors({"nvidia.com/use-gputype": wanted}, "gpubus.io")
    pattern = re.search(r'matches\("(.*)"\)', expr)
    assert pattern is not None
    regex = pattern.group(1).replace("(?i)", "")
    assert bool(re.search(regex, product, re.IGNORECASE)) is match


@pytest.mark.parametrize(("obj", "says"), [
    (pod(container(limits={GPU: 1, PCT: 50})), "50 % of each card's memory"),
    (_annotated({"nvidia.com/use-gputype": 'A100")||true||("'}), "is not a GPU type"),
    (_annotated({"nvidia.com/use-gpuuuid": 'GPU-1"]'}), "is not a GPU UUID"),
])
def test_untranslatable_requests_are_refused_saying_why(obj: dict[str, Any], says: str) -> None:
    decision = run(obj, DRA)
    assert not decision.allowed and decision.outcome is Outcome.NOT_TRANSLATABLE
    assert decision.code == 400 and says in decision.message


def test_a_preset_node_is_refused() -> None:
    decision = run(pod(container(limits={GPU: 1}), nodeName="node-1"), DRA)
    assert not decision.allowed and decision.outcome is Outcome.NODE_ASSIGNED


def test_admitting_the_admitted_pod_changes_nothing() -> None:
    out, _ = admitted(pod(container(limits={GPU: 1, MEM: 3000, CORES: 30})))
    again = run(out, DRA)
    assert again.allowed and again.patch == () and again.templates == ()


def test_extender_mode_is_unchanged() -> None:
    out, decision = admitted(pod(container(limits={GPU: 1, MEM: 3000})), AdmissionSettings())
    assert decision.templates == ()
    assert out["spec"]["schedulerName"] == "gpubus-scheduler"
    assert "resourceClaims" not in out["spec"]
