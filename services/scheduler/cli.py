"""The scheduler's commands: ``gpubus scheduler`` (the extender) and ``gpubus explain`` (offline Fit).

``gpubus scheduler``: flags -> settings -> :func:`services.scheduler.app.run` under
:func:`shared.cli_options.run_service` (the one signal and exit path). Every flag maps to a
:class:`SchedulerSettings` field (env ``GPUBUS_SCHEDULER_<FIELD>``, file ``--config``) or to the bus
settings (env ``GPUBUS_BUS_*``).

``gpubus explain --cluster CLUSTER.json --pod POD.yaml [--json]``: reads the two files, calls the pure
core (:mod:`services.scheduler.explain`), prints. Exit 0 when some node fits, 1 when none does, 2 on
bad input with one line naming the field (never a traceback).

Option parsing and file reading only; no scheduling logic lives here.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated

import typer
import yaml

from services.scheduler.explain import (
    Pending,
    explain,
    load_cluster,
    load_residents,
    pod_priority,
    render_table,
)
from services.scheduler.fit import Policies
from services.scheduler.score import GpuPolicy, NodePolicy, policy_chain
from shared.cli_options import CommonOptions, bad_parameters, common_options, run_service
from shared.config import load_settings
from shared.errors import BadInput
from shared.logs import setup_logging
from shared.requests import pod_request

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
    lease_ttl: Annotated[
        float | None, Opt(help="Verdict-replay margin of a new leader, seconds (default 30).")
    ] = None,
    bind_timeout: Annotated[
        float | None, Opt(help="Longest wait for the Allocate handoff slots in /bind, seconds (25).")
    ] = None,
    legacy_metrics: Annotated[
        bool | None, Opt("--legacy-metrics", help="HAMi's pre-v2.9 metric names.")
    ] = None,
    replica_id: Annotated[str | None, Opt(help="Identity in the leader lease (default host-pid).")] = None,
    dra_driver: Annotated[str | None, Opt(
        help="DRA mode: publish claims of this driver kube-scheduler allocated as allocation.decided.",
    )] = None,
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
    preemption: Annotated[
        bool | None, Opt("--preemption/--no-preemption",
                         help="Evict lower-priority pods to make card room for a pending pod (default on).")
    ] = None,
    preemption_hold: Annotated[
        float | None, Opt(help="How long room made by preemption is held for its pod, seconds (120).")
    ] = None,
    common: CommonOptions,
) -> None:
    """Run the kube-scheduler extender: filter, prioritize and bind GPU pods from the ledger on NATS."""
    cli = common.settings_overrides(
        locals(), lease_ttl="lease_ttl_s", bind_timeout="bind_timeout_s", quota_refresh="quota_refresh_s",
        preemption_hold="preemption_hold_s",
    )
    from services.scheduler.app import run
    from services.scheduler.settings import SchedulerSettings

    with bad_parameters():
        settings = load_settings(SchedulerSettings, cli=cli, env_prefix=ENV_PREFIX, file=common.config)
        bus = common.bus("gpubus-scheduler")
    setup_logging(settings.log_level, settings.log_json)
    run_service("scheduler", functools.partial(run, settings, bus))


def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{option}: no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{option}: cannot read {path}: {e}") from None


def _load_cluster(path: Path) -> object:
    try:
        return json.loads(_read(path, "--cluster"))
    except json.JSONDecodeError as e:
        raise BadInput(f"--cluster: {path} is not JSON: {e}") from None
    except RecursionError:
        raise BadInput(f"--cluster: {path} is nested too deeply") from None


def _load_pod(path: Path) -> dict[str, object]:
    try:
        data = yaml.safe_load(_read(path, "--pod"))
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadInput(f"--pod: {path} is not YAML/JSON: {first}") from None
    except RecursionError:
        raise BadInput(f"--pod: {path} is nested too deeply") from None
    if not isinstance(data, dict):
        raise BadInput(f"--pod: {path} must hold a Pod object")
    return data


def policies(node: str, gpu: str) -> Policies:
    """The default policies from the command line; BadInput naming the option if unknown."""
    if node not in NodePolicy.__members__.values():
        raise BadInput(f"--node-policy {node!r}: expected one of {', '.join(NodePolicy)}")
    chain = policy_chain(gpu)
    unknown = [p for p in chain if p not in GpuPolicy.__members__.values()]
    if unknown or not chain:
        raise BadInput(f"--gpu-policy {gpu!r}: expected one of {', '.join(GpuPolicy)} (comma-separated)")
    return Policies(node=node, gpu=gpu)


def run_explain(cluster: Path, pod: Path, *, as_json: bool, policy: Policies) -> tuple[int, str]:
    """Exit code and output text; BadInput propagates for the caller to report."""
    data = _load_cluster(cluster)
    nodes = load_cluster(data)
    residents = load_residents(data, nodes)
    manifest = _load_pod(pod)
    request = pod_request(manifest)
    pending = None
    if residents is not None:
        priority, preemption_policy = pod_priority(manifest)
        pending = Pending(residents=residents, priority=priority, policy=preemption_policy)
    report = explain(nodes, request, policy, pending)
    code = 0 if report["chosen"] is not None else 1
    if as_json:
        return code, json.dumps(report)
    return code, render_table(report, f"{request.namespace}/{request.name or _generated(manifest)}")


def _generated(manifest: dict[str, object]) -> str:
    """A manifest with ``generateName`` has no name until created: its prefix and a star stand for it."""
    meta = manifest.get("metadata")
    prefix = meta.get("generateName") if isinstance(meta, dict) else None
    return f"{prefix}*" if isinstance(prefix, str) and prefix else ""


def explain_command(  # noqa: PLR0917 - typer maps parameters to the command line
    cluster: Annotated[
        Path | None, typer.Option("--cluster", help="CLUSTER.json snapshot (nodes, devices, usage).")
    ] = None,
    pod: Annotated[
        Path | None, typer.Option("--pod", help="Pod manifest (YAML or JSON), annotations included.")
    ] = None,
    pending: Annotated[str | None, typer.Option(
        "--pending", metavar="NAMESPACE/NAME",
        help="DRA mode: a live pod whose claims wait; kube-scheduler's reason and each card's room.")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="For --pending (~/.kube/config).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the machine-readable report.")] = False,
    node_policy: Annotated[str, typer.Option(help="Default node policy (binpack|spread).")] = "binpack",
    gpu_policy: Annotated[str, typer.Option(help="Default GPU policy (spread|binpack|...).")] = "spread",
) -> None:
    """Why is my pod Pending? Run the scheduler's filter and score on a snapshot (or, in DRA mode,
    read a pending pod's claims and the cards' room from the cluster)."""
    try:
        if pending is not None:
            from services.scheduler.explain_live import run_explain_pending
            code, text = run_explain_pending(pending, kubeconfig or Path.home() / ".kube" / "config",
                                             as_json=as_json)
        elif cluster is None or pod is None:
            raise BadInput("give --cluster and --pod (a snapshot), or --pending NAMESPACE/NAME (DRA, live)")
        else:
            code, text = run_explain(cluster, pod, as_json=as_json, policy=policies(node_policy, gpu_policy))
    except BadInput as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(text)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add the scheduler's commands to the ``gpubus`` app."""
    app.command("explain")(explain_command)
    app.command("scheduler")(scheduler)
