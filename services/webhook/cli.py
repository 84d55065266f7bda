"""``gpubus webhook``: flags -> settings -> :func:`services.webhook.app.run` until SIGTERM.

Only option parsing lives here: every flag maps to a :class:`WebhookSettings` field (env
``GPUBUS_WEBHOOK_<FIELD>``, file ``--config``) or to the bus settings (env ``GPUBUS_BUS_*``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Annotated, Any

import typer

from shared.config import load_settings
from shared.errors import BadInput, GpubusError
from shared.logs import setup_logging
from shared.service import load_bus_settings

Opt = typer.Option


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
    kubeconfig: Annotated[str | None, Opt(help="Kubeconfig for reading ResourceQuotas.")] = None,
    in_cluster: Annotated[bool | None, Opt("--in-cluster", help="Use the pod's service account.")] = None,
    nats_url: Annotated[
        str | None, Opt("--nats-url", "--nats", help="NATS URL(s) (env GPUBUS_BUS_URL).")
    ] = None,
    nats_creds: Annotated[str | None, Opt(help="NATS .creds file.")] = None,
    nats_tls_ca: Annotated[str | None, Opt(help="CA bundle of the NATS server (enables TLS).")] = None,
    config: Annotated[str | None, Opt(help="YAML settings file.")] = None,
    log_level: Annotated[str | None, Opt(help="debug, info, warning, error.")] = None,
    log_json: Annotated[bool | None, Opt("--log-json", help="JSON log lines.")] = None,
) -> None:
    """Run the mutating admission webhook: HAMi's pod defaults, refusals and the gpubus scheduler name."""
    cli: dict[str, Any] = {
        k: v for k, v in locals().items() if k not in ("config", "nats_url", "nats_creds", "nats_tls_ca")
    }
    from services.webhook.app import run
    from services.webhook.settings import ENV_PREFIX, WebhookSettings

    try:
        settings = load_settings(WebhookSettings, cli=cli, env_prefix=ENV_PREFIX, file=config)
        settings.admission()  # validates the core policy before anything starts
        bus = load_bus_settings("gpubus-webhook", url=nats_url, creds_file=nats_creds, tls_ca=nats_tls_ca)
    except (BadInput, ValueError) as e:
        raise typer.BadParameter(str(e)) from e
    setup_logging(settings.log_level, settings.log_json)
    try:
        _run_loop(run(settings, bus))
    except GpubusError as e:
        typer.echo(f"webhook: {e}", err=True)
        raise typer.Exit(1) from e


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop where installed (it trims the admission tail latency), asyncio otherwise."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def register(app: typer.Typer) -> None:
    app.command("webhook")(webhook)
