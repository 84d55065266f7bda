"""Tamper-resistant limits (contract item 7): pods may not set the limiter's own env vars.

Case matrix: each protected name (exact and ``CUDA_DEVICE_MEMORY_LIMIT*``) x GPU container /
sidecar / init container x literal value / valueFrom; ``LD_PRELOAD`` of CUDA/NVML/limiter
libraries vs harmless ones; ``envFrom`` prefixes; the core policy env; allow-listed namespaces;
pods without a GPU; the webhook's own injected env on reinvocation.
"""

from __future__ import annotations

from typing import Any

import pytest
from admission_builders import container, mutated, pod, run

from services.webhook.admission import AdmissionSettings, GpuCorePolicy, Outcome

GPU = "nvidia.com/gpu"


def gpu_pod_with_env(env: list[dict[str, Any]], where: str = "gpu", **kw: Any) -> dict[str, Any]:
    gpu = container("train", limits={GPU: 1}, env=env if where == "gpu" else None, **kw)
    side = container("side", env=env if where == "side" else None)
    init = [container("setup", env=env if where == "init" else None)]
    return pod(gpu, side, init=init)


@pytest.mark.parametrize(
    "name",
    [
        "CUDA_DISABLE_CONTROL",
        "CUDA_DEVICE_MEMORY_LIMIT",
        "CUDA_DEVICE_MEMORY_LIMIT_0",
        "CUDA_DEVICE_MEMORY_LIMIT_7",
        "CUDA_DEVICE_SM_LIMIT",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE",
    ],
)
@pytest.mark.parametrize("where", ["gpu", "side", "init"])
def test_setting_a_limiter_variable_is_refused(name: str, where: str) -> None:
    d = run(gpu_pod_with_env([{"name": name, "value": "1"}], where))
    assert not d.allowed and d.code == 403 and d.outcome is Outcome.LIMITER_TAMPERING
    assert name in d.message and "allow-listed" in d.message


def test_a_limiter_variable_from_a_reference_is_refused_too() -> None:
    env = [{"name": "CUDA_DISABLE_CONTROL", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]
    assert not run(gpu_pod_with_env(env)).allowed


def test_allow_listed_namespaces_may_set_limiter_variables() -> None:
    settings = AdmissionSettings(allow_limiter_env_namespaces=frozenset({"gpu-admin"}))
    env = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    assert run(gpu_pod_with_env(env), settings, namespace="gpu-admin").allowed
    assert not run(gpu_pod_with_env(env), settings, namespace="team-a").allowed


def test_pods_without_gpu_are_not_checked() -> None:
    assert run(pod(container(env=[{"name": "CUDA_DISABLE_CONTROL", "value": "1"}]))).allowed


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", True),
        ("libnvidia-ml.so.1", True),
        ("/opt/libjemalloc.so:/usr/local/vgpu/libvgpu.so", True),
        ("/tmp/libcudart.so.12 /lib/libm.so", True),
        ("/usr/lib/libjemalloc.so.2", False),
        ("libtcmalloc_minimal.so.4", False),
        ("", False),
    ],
)
def test_ld_preload_of_cuda_libraries_is_refused(value: str, refused: bool) -> None:
    d = run(gpu_pod_with_env([{"name": "LD_PRELOAD", "value": value}]))
    assert d.allowed is not refused
    if refused:
        assert "LD_PRELOAD" in d.message


def test_ld_preload_from_a_reference_cannot_be_checked_and_is_refused() -> None:
    env = [{"name": "LD_PRELOAD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    assert not run(gpu_pod_with_env(env)).allowed


@pytest.mark.parametrize(
    ("prefix", "refused"),
    [
        ("CUDA_", True),
        ("CUDA_DEVICE_MEMORY_LIMIT_", True),
        ("LD_", True),
        ("GPU_CORE_", True),
        ("APP_", False),
    ],
)
def test_env_from_prefixes_that_could_spell_a_limiter_variable_are_refused(
    prefix: str, refused: bool
) -> None:
    obj = pod(
        container("train", limits={GPU: 1}, envFrom=[{"prefix": prefix, "configMapRef": {"name": "cm"}}])
    )
    assert run(obj).allowed is not refused


def test_env_from_without_prefix_is_allowed_because_its_keys_are_not_visible() -> None:
    assert run(pod(container("train", limits={GPU: 1}, envFrom=[{"configMapRef": {"name": "cm"}}]))).allowed


@pytest.mark.parametrize(("value", "refused"), [("disable", True), ("force", False), ("default", False)])
def test_core_policy_env_may_only_tighten(value: str, refused: bool) -> None:
    d = run(gpu_pod_with_env([{"name": "GPU_CORE_UTILIZATION_POLICY", "value": value}]))
    assert d.allowed is not refused


@pytest.mark.parametrize("policy", [GpuCorePolicy.DISABLE, GpuCorePolicy.FORCE])
def test_the_webhooks_own_core_policy_env_passes_on_reinvocation(policy: GpuCorePolicy) -> None:
    settings = AdmissionSettings(gpu_core_policy=policy)
    once = mutated(pod(container("train", limits={GPU: 1})), settings)
    again = run(once, settings)
    assert again.allowed and again.patch == ()
