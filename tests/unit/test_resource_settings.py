"""The HAMi resource names the scheduler and the webhook share (:mod:`shared.resource_settings`).

Cases, for both services' settings: each field keeps its env name ``<PREFIX><FIELD>`` and its
YAML key (``resource_mem`` or ``resource-mem``); the defaults are HAMi's chart defaults; the same
values give both services the same request derivation settings.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.scheduler.cli import ENV_PREFIX as SCHEDULER_ENV_PREFIX
from services.scheduler.settings import SchedulerSettings
from services.webhook.settings import ENV_PREFIX as WEBHOOK_ENV_PREFIX
from services.webhook.settings import WebhookSettings
from shared.config import load_settings
from shared.requests import DEFAULT_NAMES, ResourceNames
from shared.resource_settings import ResourceNameSettings

SERVICES = pytest.mark.parametrize(
    ("cls", "prefix"),
    [(SchedulerSettings, SCHEDULER_ENV_PREFIX), (WebhookSettings, WEBHOOK_ENV_PREFIX)],
    ids=["scheduler", "webhook"],
)
VALUES = {
    "resource_name": "hami.io/gpu",
    "resource_mem": "hami.io/mem",
    "resource_mem_percentage": "hami.io/mem-pct",
    "resource_cores": "hami.io/cores",
    "resource_priority": "hami.io/prio",
    "default_mem": "512",
    "default_cores": "20",
    "default_gpu_num": "2",
    "memory_factor": "4",
}
EXPECTED = ResourceNames(
    count="hami.io/gpu", memory="hami.io/mem", memory_percentage="hami.io/mem-pct", cores="hami.io/cores",
    priority="hami.io/prio", default_memory=512, default_cores=20, default_gpu_num=2, memory_factor=4,
)


@SERVICES
def test_env_names_are_the_service_prefix_and_the_field(cls: type[ResourceNameSettings], prefix: str) -> None:
    environ = {f"{prefix}{name.upper()}": value for name, value in VALUES.items()}
    assert load_settings(cls, env_prefix=prefix, environ=environ).names() == EXPECTED


@SERVICES
@pytest.mark.parametrize("dashes", [False, True], ids=["underscores", "dashes"])
def test_yaml_keys_are_the_field_names(
    cls: type[ResourceNameSettings], prefix: str, dashes: bool, tmp_path: Path
) -> None:
    file = tmp_path / "settings.yaml"
    file.write_text("".join(f"{name.replace('_', '-') if dashes else name}: {value}\n"
                            for name, value in VALUES.items()))
    assert load_settings(cls, env_prefix=prefix, file=file, environ={}).names() == EXPECTED


@SERVICES
def test_defaults_are_hamis(cls: type[ResourceNameSettings], prefix: str) -> None:
    assert load_settings(cls, env_prefix=prefix, environ={}).names() == DEFAULT_NAMES
