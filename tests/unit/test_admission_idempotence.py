"""Properties of the admission core over many generated pods.

- Idempotence (``reinvocationPolicy: IfNeeded``): admitting the patched pod again is allowed and
  yields no patch.
- The patch always applies (every path exists or is a valid add) and touches only ``/spec``.
- A denial never carries a patch; an allowed non-GPU pod is never routed to our scheduler.
"""

from __future__ import annotations

from typing import Any

from admission_builders import apply_patch, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.webhook.admission import AdmissionSettings, GpuCorePolicy
from shared.requests import ResourceNames

RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
    "cpu",
]
QUANTITIES = st.one_of(
    st.integers(-1, 4),
    st.sampled_from(["1", "2", "100", "50", "3000", "0", "1.5", "2Gi", "x"]),
    st.integers(0, 120),
)
ENV_NAMES = [
    "A",
    "CUDA_TASK_PRIORITY",
    "NVIDIA_VISIBLE_DEVICES",
    "GPU_CORE_UTILIZATION_POLICY",
    "LD_PRELOAD",
    "CUDA_DISABLE_CONTROL",
]


@st.composite
def containers(draw: st.DrawFn, prefix: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": f"{prefix}{draw(st.integers(0, 99))}", "image": "x"}
    resources: dict[str, Any] = {}
    for part in ("limits", "requests"):
        if draw(st.booleans()):
            resources[part] = draw(st.dictionaries(st.sampled_from(RESOURCES), QUANTITIES, max_size=4))
    keep_empty: bool = draw(st.booleans())
    if resources or keep_empty:
        c["resources"] = resources
    if draw(st.booleans()):
        c["env"] = draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(ENV_NAMES),
                        "value": st.sampled_from(
                            ["0", "1", "all", "none", "force", "disable", "libjemalloc.so", "libcuda.so"]
                        ),
                    }
                ),
                max_size=3,
            )
        )
    if draw(st.integers(0, 9)) == 0:
        c["securityContext"] = {"privileged": True}
    return c


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers("c"), min_size=0, max_size=3))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(containers("i"), max_size=2))
    scheduler = draw(st.sampled_from([None, "default-scheduler", "gpubus-scheduler", "volcano"]))
    if scheduler:
        spec["schedulerName"] = scheduler
    if draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = "n1"
    if draw(st.booleans()):
        spec["runtimeClassName"] = draw(st.sampled_from(["kata", "nvidia"]))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


admission_settings = st.builds(
    AdmissionSettings,
    names=st.builds(
        ResourceNames,
        default_gpu_num=st.integers(0, 2),
        default_memory=st.sampled_from([0, 1000]),
        default_cores=st.sampled_from([0, 20]),
    ),
    scheduler_name=st.sampled_from(["gpubus-scheduler", ""]),
    force_overwrite_default_scheduler=st.booleans(),
    gpu_core_policy=st.sampled_from(list(GpuCorePolicy)),
    overwrite_env=st.booleans(),
    runtime_class_name=st.sampled_from(["", "nvidia"]),
    allow_limiter_env_namespaces=st.sampled_from([frozenset(), frozenset({"ns"})]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), s=admission_settings)
def test_admitting_the_admitted_pod_again_changes_nothing(pod: dict[str, Any], s: AdmissionSettings) -> None:
    first = run(pod, s)
    if not first.allowed:
        assert first.patch == ()
        return
    assert all(op["path"].startswith("/spec/") for op in first.patch)
    patched = apply_patch(pod, first.patch)
    second = run(patched, s)
    assert second.allowed, second.message
    assert second.patch == ()
    assert second.requests == first.requests
    if not first.gpu:
        assert patched["spec"].get("schedulerName") == pod["spec"].get("schedulerName")
