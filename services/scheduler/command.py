"""``gpubus scheduler``: flags -> settings -> :class:`services.scheduler.app.SchedulerApp` until SIGTERM.

Only option parsing lives here: every flag maps to a :class:`SchedulerSettings` field (env
``GPUBUS_SCHEDULER_<FIELD>``, file ``--config``) or to the bus settings (env ``GPUBUS_BUS_*``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Annotated, Any

import typer

from shared.cli_options import CommonOptions, bad_parameters, common_options, run_service
from shared.config import load_settings
from shared.logs import setup_logging

ENV_PREFIX = "GPUBUS_SCHEDULER_"

Opt = typer.Option


@common_options()
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
    common: CommonOptions,
) -> None:
    """Run the kube-scheduler extender: filter, prioritize and bind GPU pods from the ledger on NATS."""
    cli = common.settings_overrides(
        locals(), lease_ttl="lease_ttl_s", bind_timeout="bind_timeout_s", quota_refresh="quota_refresh_s"
    )
    from services.scheduler.app import SchedulerApp
    from services.scheduler.settings import SchedulerSettings

    with bad_parameters():
        settings = load_settings(SchedulerSettings, cli=cli, env_prefix=ENV_PREFIX, file=common.config)
        bus = common.bus("gpubus-scheduler")
    setup_logging(settings.log_level, settings.log_json)
    run_service("scheduler", _until_signal(SchedulerApp(settings, bus).run()))


async def _until_signal(main: Any) -> None:
    task = asyncio.ensure_future(main)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def register_scheduler(app: typer.Typer) -> None:
    app.command("scheduler")(scheduler)
