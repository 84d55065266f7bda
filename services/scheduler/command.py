"""``gpubus scheduler``: flags -> settings -> :class:`services.scheduler.app.SchedulerApp` until SIGTERM.

Only option parsing lives here: every flag maps to a :class:`SchedulerSettings` field (env
``GPUBUS_SCHEDULER_<FIELD>``, file ``--config``) or to the bus settings (env ``GPUBUS_BUS_*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Annotated, Any

import typer

from shared.bus import BusSettings
from shared.config import load_settings
from shared.errors import BadInput, GpubusError
from shared.logs import setup_logging

ENV_PREFIX = "GPUBUS_SCHEDULER_"
BUS_ENV_PREFIX = "GPUBUS_BUS_"

Opt = typer.Option


def scheduler(
    *,
    bind: Annotated[str | None, Opt(help="Listen address (default 0.0.0.0).")] = None,
    port: Annotated[
        int | None, Opt(help="Extender port: /filter /prioritize /bind /metrics (default 8080).")
    ] = None,
    scheduler_name: Annotated[str | None, Opt(help="Watch pods of this schedulerName ('' = all).")] = None,
    node_scheduler_policy: Annotated[str | None, Opt(help="binpack (default) or spread.")] = None,
    gpu_scheduler_policy: Annotated[
        str | None, Opt(help="spread (default), binpack, numa, mutex, ...")
    ] = None,
    single_node_filter: Annotated[
        bool | None, Opt("--single-node-filter", help="HAMi mode: filter returns only the best node.")
    ] = None,
    lease_ttl: Annotated[float | None, Opt(help="Allocate lease TTL, seconds (default 30).")] = None,
    bind_timeout: Annotated[
        float | None, Opt(help="Longest wait for a lease in /bind, seconds (25).")
    ] = None,
    legacy_metrics: Annotated[
        bool | None, Opt("--legacy-metrics", help="HAMi's pre-v2.9 metric names.")
    ] = None,
    replica_id: Annotated[str | None, Opt(help="Identity in the leader lease (default host-pid).")] = None,
    resource_name: Annotated[str | None, Opt(help="Card count resource (nvidia.com/gpu).")] = None,
    resource_mem: Annotated[
        str | None, Opt(help="Memory resource; limits.<it> in a ResourceQuota caps a namespace.")
    ] = None,
    resource_cores: Annotated[
        str | None, Opt(help="Cores resource; limits.<it> in a ResourceQuota caps a namespace.")
    ] = None,
    memory_factor: Annotated[
        int | None, Opt(help="gpumem (and memory quotas) are multiplied by this.")
    ] = None,
    quota_refresh: Annotated[
        float | None, Opt(help="Re-read each namespace's ResourceQuotas this often, seconds (10).")
    ] = None,
    kubeconfig: Annotated[str | None, Opt(help="Kubeconfig of the cluster.")] = None,
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
    """Run the kube-scheduler extender: filter, prioritize and bind GPU pods from the ledger on NATS."""
    cli: dict[str, Any] = {
        "bind": bind,
        "port": port,
        "scheduler_name": scheduler_name,
        "node_scheduler_policy": node_scheduler_policy,
        "gpu_scheduler_policy": gpu_scheduler_policy,
        "single_node_filter": single_node_filter,
        "lease_ttl_s": lease_ttl,
        "bind_timeout_s": bind_timeout,
        "legacy_metrics": legacy_metrics,
        "replica_id": replica_id,
        "resource_name": resource_name,
        "resource_mem": resource_mem,
        "resource_cores": resource_cores,
        "memory_factor": memory_factor,
        "quota_refresh_s": quota_refresh,
        "kubeconfig": kubeconfig,
        "in_cluster": in_cluster,
        "log_level": log_level,
        "log_json": log_json,
    }
    from services.scheduler.app import SchedulerApp
    from services.scheduler.settings import SchedulerSettings

    try:
        settings = load_settings(SchedulerSettings, cli=cli, env_prefix=ENV_PREFIX, file=config)
        bus = load_settings(
            BusSettings,
            cli={
                "url": nats_url,
                "creds_file": nats_creds,
                "tls_ca": nats_tls_ca,
                "name": "gpubus-scheduler",
            },
            env_prefix=BUS_ENV_PREFIX,
        )
    except (BadInput, ValueError) as e:
        raise typer.BadParameter(str(e)) from e
    setup_logging(settings.log_level, settings.log_json)
    try:
        _run_loop(_until_signal(SchedulerApp(settings, bus).run()))
    except GpubusError as e:
        typer.echo(f"scheduler: {e}", err=True)
        raise typer.Exit(1) from e


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop where installed (it trims the /filter tail latency), asyncio otherwise."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


async def _until_signal(main: Any) -> None:
    task = asyncio.ensure_future(main)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def register_scheduler(app: typer.Typer) -> None:
    app.command("scheduler")(scheduler)
