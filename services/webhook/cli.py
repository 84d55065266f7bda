"""``gpubus webhook``: flags -> settings -> :func:`services.webhook.app.run` until SIGTERM.

Only option parsing lives here: every flag maps to a :class:`WebhookSettings` field (env
``GPUBUS_WEBHOOK_<FIELD>``, file ``--config``) or to the bus settings (env ``GPUBUS_BUS_*``).
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from shared.cli_options import CommonOptions, bad_parameters, common_options, run_service
from shared.config import load_settings
from shared.logs import setup_logging

Opt = typer.Option


@common_options("for reading ResourceQuotas")
def webhook(
    *,
    bind: Annotated[str | None, Opt(help="Listen address (default 0.0.0.0).")] = None,
    port: Annotated[int | None, Opt(help="HTTPS port (default 8443).")] = None,
    cert: Annotated[str | None, Opt(help="PEM serving certificate; reloaded when it changes.")] = None,
    key: Annotated[str | None, Opt(help="PEM private key of --cert.")] = None,
    scheduler_name: Annotated[
        str | None, Opt(help="schedulerName for GPU pods (default gpubus-scheduler; '' = keep).")
    ] = None,
    force_overwrite_default_scheduler: Annotated[
        bool | None,
        Opt(
            "--force-overwrite-default-scheduler/--no-force-overwrite-default-scheduler",
            help="Also reroute pods naming default-scheduler (default on).",
        ),
    ] = None,
    resource_name: Annotated[str | None, Opt(help="Card count resource (nvidia.com/gpu).")] = None,
    resource_mem: Annotated[
        str | None, Opt(help="Memory resource, MiB per card (nvidia.com/gpumem).")
    ] = None,
    resource_mem_percentage: Annotated[str | None, Opt(help="Memory percentage resource.")] = None,
    resource_cores: Annotated[
        str | None, Opt(help="Cores resource, % per card (nvidia.com/gpucores).")
    ] = None,
    resource_priority: Annotated[str | None, Opt(help="Priority resource (nvidia.com/priority).")] = None,
    default_mem: Annotated[int | None, Opt(help="MiB per card when none is asked (0 = whole card).")] = None,
    default_cores: Annotated[int | None, Opt(help="Cores per card when none are asked.")] = None,
    default_gpu_num: Annotated[int | None, Opt(help="Cards implied by memory/cores without a count.")] = None,
    memory_factor: Annotated[int | None, Opt(help="gpumem is multiplied by this.")] = None,
    gpu_core_policy: Annotated[str | None, Opt(help="default, force or disable.")] = None,
    overwrite_env: Annotated[
        bool | None,
        Opt("--overwrite-env/--no-overwrite-env", help="NVIDIA_VISIBLE_DEVICES=none for non-GPU containers."),
    ] = None,
    runtime_class_name: Annotated[str | None, Opt(help="runtimeClassName for GPU pods without one.")] = None,
    allow_limiter_env_namespaces: Annotated[
        str | None, Opt(help="Comma list of namespaces whose pods may set the limiter's env vars.")
    ] = None,
    quota_cache_ttl_s: Annotated[float | None, Opt(help="Seconds a namespace's quotas are reused.")] = None,
    mode: Annotated[str | None, Opt(help="extender (HAMi's: scheduler extender + device plugin) or dra "
                                         "(GPU limits become ResourceClaims).")] = None,
    dra_device_class: Annotated[str | None, Opt(help="DRA mode: the DeviceClass claims name.")] = None,
    dra_driver: Annotated[str | None, Opt(help="DRA mode: the driver of the device attributes.")] = None,
    common: CommonOptions,
) -> None:
    """Run the mutating admission webhook: HAMi's pod defaults, refusals and the gpubus scheduler name."""
    cli = common.settings_overrides(locals())
    from services.webhook.app import run
    from services.webhook.settings import ENV_PREFIX, WebhookSettings

    with bad_parameters():
        settings = load_settings(WebhookSettings, cli=cli, env_prefix=ENV_PREFIX, file=common.config)
        settings.admission()  # validates the core policy before anything starts
        bus = common.bus("gpubus-webhook")
    setup_logging(settings.log_level, settings.log_json)
    run_service("webhook", functools.partial(run, settings, bus))


def register(app: typer.Typer) -> None:
    app.command("webhook")(webhook)
