"""``gpubus monitor``: flags -> settings -> :func:`services.monitor.app.run` under ``run_service``.

Only maps the command line onto :mod:`services.monitor.settings` and runs the composition
root; it knows nothing about how usage is collected.
"""

from __future__ import annotations

import functools
import logging
from typing import Annotated

import typer

from services.monitor import settings as monitor_settings
from services.monitor.app import run
from shared.cli_options import ConfigFile, LogJson, LogLevel, NatsCreds, NatsReplicas, NatsTlsCa, run_service
from shared.errors import GpubusError
from shared.logs import setup_logging

log = logging.getLogger(__name__)


def register(app: typer.Typer) -> None:
    app.command("monitor")(monitor)


def monitor(  # noqa: PLR0917 - typer maps parameters to the command line
    node: Annotated[
        list[str] | None,
        typer.Option(
            "--node-name",
            "--node",
            help="Node to monitor (repeat for several simulated nodes; env NODE_NAME).",
        ),
    ] = None,
    hook_path: Annotated[
        str | None,
        typer.Option(
            help="HAMi-core directory holding containers/<podUID>_<ctr>/*.cache ('{node}' = node name)."
        ),
    ] = None,
    source: Annotated[
        list[str] | None,
        typer.Option(help="Usage source, repeatable, in priority order: hami-core, nvml, sim."),
    ] = None,
    metrics_bind: Annotated[str | None, typer.Option(help="Bind address of /metrics.")] = None,
    port: Annotated[int | None, typer.Option("--port", "--metrics-port", help="Port of /metrics.")] = None,
    interval: Annotated[float | None, typer.Option(help="Collection interval, seconds.")] = None,
    publish_interval: Annotated[
        float | None, typer.Option(help="Least seconds between usage events.")
    ] = None,
    legacy_metrics: Annotated[
        bool | None,
        typer.Option(
            "--legacy-metrics/--no-legacy-metrics", help="Also export HAMi's pre-v2.9 metric names."
        ),
    ] = None,
    proc_root: Annotated[str | None, typer.Option(help="/proc of the host (NVML source).")] = None,
    sim_overuse: Annotated[
        list[str] | None,
        typer.Option(help="Sim source: pod (ns/name or name, wildcards) that uses more than its slice."),
    ] = None,
    config: ConfigFile = None,
    nats: Annotated[
        str | None,
        typer.Option("--nats-url", "--nats", help="NATS URL(s) (env GPUBUS_BUS_URL); 'none' runs without."),
    ] = None,
    nats_creds: NatsCreds = None,
    nats_tls_ca: NatsTlsCa = None,
    nats_replicas: NatsReplicas = None,
    log_level: LogLevel = None,
    log_json: LogJson = None,
) -> None:
    """Per-container GPU usage: HAMi-compatible /metrics and usage events on NATS."""
    try:
        settings = monitor_settings.load(
            {
                "nodes": tuple(node) if node else None,
                "hook_path": hook_path,
                "sources": tuple(source) if source else None,
                "metrics_bind": metrics_bind,
                "metrics_port": port,
                "interval_s": interval,
                "publish_interval_s": publish_interval,
                "legacy_metrics": legacy_metrics,
                "proc_root": proc_root,
                "sim_overuse": tuple(sim_overuse) if sim_overuse else None,
                "log_level": log_level,
                "log_json": log_json,
            },
            file=config,
        )
        bus_settings = (
            None
            if nats == "none"
            else monitor_settings.load_bus(url=nats, creds_file=nats_creds, tls_ca=nats_tls_ca,
                                                replicas=nats_replicas)
        )
    except GpubusError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    setup_logging(settings.log_level, settings.log_json)
    run_service("monitor", functools.partial(run, settings, bus_settings))

