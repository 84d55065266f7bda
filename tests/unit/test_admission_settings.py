"""``gpubus webhook`` settings: env ``GPUBUS_WEBHOOK_*`` and CLI values become the admission settings."""

from __future__ import annotations

import pytest

from services.webhook.admission import GpuCorePolicy
from services.webhook.settings import ENV_PREFIX, WebhookSettings
from shared.config import load_settings
from shared.requests import ResourceNames


def test_env_values_reach_the_admission_core() -> None:
    environ = {
        "GPUBUS_WEBHOOK_SCHEDULER_NAME": "hami-scheduler",
        "GPUBUS_WEBHOOK_FORCE_OVERWRITE_DEFAULT_SCHEDULER": "false",
        "GPUBUS_WEBHOOK_GPU_CORE_POLICY": "force",
        "GPUBUS_WEBHOOK_OVERWRITE_ENV": "true",
        "GPUBUS_WEBHOOK_ALLOW_LIMITER_ENV_NAMESPACES": "gpu-admin, kube-system",
        "GPUBUS_WEBHOOK_DEFAULT_GPU_NUM": "2",
        "GPUBUS_WEBHOOK_RESOURCE_NAME": "hami.io/gpu",
    }
    s = load_settings(WebhookSettings, env_prefix=ENV_PREFIX, environ=environ).admission()
    assert (s.scheduler_name, s.force_overwrite_default_scheduler, s.gpu_core_policy, s.overwrite_env) == (
        "hami-scheduler",
        False,
        GpuCorePolicy.FORCE,
        True,
    )
    assert s.allow_limiter_env_namespaces == frozenset({"gpu-admin", "kube-system"})
    assert s.names == ResourceNames(count="hami.io/gpu", default_gpu_num=2)


def test_cli_wins_over_env() -> None:
    s = load_settings(
        WebhookSettings,
        cli={"port": 9443, "scheduler_name": ""},
        env_prefix=ENV_PREFIX,
        environ={"GPUBUS_WEBHOOK_PORT": "1"},
    )
    assert s.port == 9443 and s.admission().scheduler_name == ""


def test_an_unknown_core_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="sometimes"):
        WebhookSettings(gpu_core_policy="sometimes").admission()
