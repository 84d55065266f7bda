"""``gpubus dashboard``: flags -> settings -> :func:`services.dashboard.app.run` until SIGTERM.

Only option parsing lives here: every flag maps to a :class:`DashboardSettings` field (env
``GPUBUS_DASHBOARD_<FIELD>``, file ``--config``) or to the bus settings (env ``GPUBUS_BUS_*``).
There is no ``--kubeconfig``: the dashboard reads NATS only.
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from shared.cli_options import (
    ConfigFile,
    InCluster,
    LogJson,
    LogLevel,
    NatsCreds,
    NatsTlsCa,
    NatsUrl,
    bad_parameters,
    kubeconfig_option,
    run_service,
)
from shared.config import load_settings
from shared.logs import setup_logging
from shared.service import load_bus_settings

Opt = typer.Option


def dashboard(  # noqa: PLR0917 - typer maps parameters to the command line
    bind: Annotated[str | None, Opt(help="Listen address (default 127.0.0.1: no login).")] = None,
    port: Annotated[int | None, Opt(help="HTTP port (default 8080; 0 = any free port).")] = None,
    history_s: Annotated[
        float | None, Opt("--history", help="Seconds of events replayed into the view and feed at start.")
    ] = None,
    checkpoint_interval_s: Annotated[
        float | None, Opt("--checkpoint-interval", help="Seconds of stream time between kept views.")
    ] = None,
    push_interval_s: Annotated[
        float | None, Opt("--push-interval", help="Least seconds between two pushes to one browser.")
    ] = None,
    pending_forget_s: Annotated[
        float | None, Opt("--pending-forget", help="Seconds after which a silent Pending pod is hidden.")
    ] = None,
    finished_retention_s: Annotated[
        float | None, Opt("--finished-retention", help="Seconds a finished pod stays viewable.")
    ] = None,
    trend_step_s: Annotated[
        float | None, Opt("--trend-step", help="Seconds between chart samples (default 10).")
    ] = None,
    idle_after_s: Annotated[
        float | None, Opt("--idle-after", help="Seconds under 5% SM use before a slice is held but idle.")
    ] = None,
    auth: Annotated[str | None, Opt(help="none (default) or kubernetes: pages need a bearer token "
                                          "allowed to get dashboards.gpubus.io.")] = None,
    auth_namespace: Annotated[str | None, Opt(help="Namespace of that dashboards resource.")] = None,
    kubeconfig: Annotated[str | None, kubeconfig_option("that reviews tokens (--auth kubernetes)")] = None,
    in_cluster: InCluster = None,
    nats_url: NatsUrl = None,
    nats_creds: NatsCreds = None,
    nats_tls_ca: NatsTlsCa = None,
    config: ConfigFile = None,
    log_level: LogLevel = None,
    log_json: LogJson = None,
) -> None:
    """Serve the live, read-only web dashboard of the cluster (from NATS; time travel included)."""
    cli = {"bind": bind, "port": port, "history_s": history_s, "checkpoint_interval_s": checkpoint_interval_s,
           "push_interval_s": push_interval_s, "pending_forget_s": pending_forget_s, "log_level": log_level,
           "log_json": log_json, "finished_retention_s": finished_retention_s, "trend_step_s": trend_step_s,
           "idle_after_s": idle_after_s, "auth": auth, "auth_namespace": auth_namespace,
           "kubeconfig": kubeconfig, "in_cluster": in_cluster}
    from services.dashboard.app import run
    from services.dashboard.settings import ENV_PREFIX, DashboardSettings

    with bad_parameters():
        settings = load_settings(DashboardSettings, cli=cli, env_prefix=ENV_PREFIX, file=config)
        bus = load_bus_settings("gpubus-dashboard", url=nats_url, creds_file=nats_creds, tls_ca=nats_tls_ca)
    setup_logging(settings.log_level, settings.log_json)
    run_service("dashboard", functools.partial(run, settings, bus))


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)
