"""The simulator's process commands: the children ``gpubus up`` starts (hidden from --help).

``gpubus sim-control`` (API server stand-in), ``gpubus sim-kube-scheduler`` and ``gpubus sim-nodes``
(node-agents, kubelet stand-ins, monitor), registered through :mod:`gpubus_local.cli`. Option parsing
only: the work is in :mod:`gpubus_local.sim.control` and :mod:`gpubus_local.sim.nodes`, imported when
a command runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer

from gpubus_local.stack import SCHEDULER_NAME
from shared.bus.settings import MAX_REPLICAS
from shared.logs import setup_logging

Opt = typer.Option


def register(app: typer.Typer) -> None:
    app.command("sim-control", hidden=True)(sim_control)
    app.command("sim-kube-scheduler", hidden=True)(sim_kube_scheduler)
    app.command("sim-nodes", hidden=True)(sim_nodes)


_NORMAL_EVENTS_HELP = "Record Normal events (Scheduled, Started); off: Warnings only (bench/e2e.py)."
_HOST_HELP = ("Address to listen on, also the server named in the kubeconfig it writes "
              "(under compose the service's name, which the other containers resolve).")
_POD_LOG_DIR_HELP = "The kubelets' container logs (/var/log/pods layout), which `kubectl logs` reads."


def sim_control(  # noqa: PLR0917 - typer maps parameters to the command line
    port: Annotated[int, Opt()],
    kubeconfig: Annotated[Path, Opt()],
    webhook_url: Annotated[str, Opt()],
    webhook_ca: Annotated[Path, Opt()],
    ready_file: Annotated[Path | None, Opt()] = None,
    host: Annotated[str, Opt(help=_HOST_HELP)] = "127.0.0.1",
    pod_log_dir: Annotated[Path | None, Opt(help=_POD_LOG_DIR_HELP)] = None,
    log_level: Annotated[str, Opt()] = "info",
    profile: Annotated[Path | None, Opt(help="Write cProfile stats here on exit.")] = None,
) -> None:
    """The API server stand-in (started by `gpubus up`)."""
    from gpubus_local.sim.control import ControlSpec, run_control

    setup_logging(log_level)
    spec = ControlSpec(port=port, kubeconfig=kubeconfig, webhook_url=webhook_url, webhook_ca=webhook_ca,
                       ready_file=ready_file, host=host, pod_log_dir=pod_log_dir)
    _run_uvloop(run_control(spec), profile)


def sim_kube_scheduler(  # noqa: PLR0917 - typer maps parameters to the command line
    kubeconfig: Annotated[Path, Opt()],
    extender_url: Annotated[str, Opt()],
    scheduler_name: Annotated[str, Opt()] = SCHEDULER_NAME,
    normal_events: Annotated[bool, Opt(help=_NORMAL_EVENTS_HELP)] = True,
    ready_file: Annotated[Path | None, Opt()] = None,
    log_level: Annotated[str, Opt()] = "info",
    profile: Annotated[Path | None, Opt(help="Write cProfile stats here on exit.")] = None,
) -> None:
    """The kube-scheduler stand-in (started by `gpubus up`)."""
    from gpubus_local.sim.control import KubeSchedulerSpec, run_kube_scheduler

    setup_logging(log_level)
    spec = KubeSchedulerSpec(kubeconfig=kubeconfig, extender_url=extender_url, scheduler_name=scheduler_name,
                             ready_file=ready_file, normal_events=normal_events)
    _run_uvloop(run_kube_scheduler(spec), profile)


def sim_nodes(  # noqa: PLR0917
    nodes: Annotated[int, Opt()],
    devices: Annotated[str, Opt()],
    kubeconfig: Annotated[Path, Opt()],
    nats: Annotated[str, Opt()],
    nats_replicas: Annotated[int, Opt(min=1, max=MAX_REPLICAS, envvar="GPUBUS_BUS_REPLICAS")] = 1,
    prefix: Annotated[str, Opt()] = "node",
    split_count: Annotated[int, Opt()] = 10,
    pod_duration: Annotated[str, Opt()] = "60s",
    metrics_port: Annotated[int, Opt()] = 0,
    metrics_bind: Annotated[str, Opt(help="The monitor's /metrics address.")] = "127.0.0.1",
    heartbeat: Annotated[float, Opt()] = 10.0,
    monitor_interval: Annotated[float, Opt()] = 5.0,
    admissions_log: Annotated[Path | None, Opt()] = None,
    pod_log_dir: Annotated[Path | None, Opt(help=_POD_LOG_DIR_HELP)] = None,
    normal_events: Annotated[bool, Opt(help=_NORMAL_EVENTS_HELP)] = True,
    ready_file: Annotated[Path | None, Opt()] = None,
    log_level: Annotated[str, Opt()] = "info",
    profile: Annotated[Path | None, Opt(help="Write cProfile stats here on exit.")] = None,
    part: Annotated[str, Opt(help="all | hosts (kubelets, monitor) | agents (node-agents).")] = "all",
    hosts_dir: Annotated[Path | None, Opt(help="The hosts' sockets and files, shared by a split's two "
                                                "processes (default: a temporary directory).")] = None,
    node_identity: Annotated[bool, Opt(help="Each node-agent connects as its node (auth callout).")] = False,
) -> None:
    """N simulated nodes in one process: node-agents, kubelet stand-ins, monitor (started by `gpubus up`)."""
    from gpubus_local.sim.nodes import PARTS, NodesSpec, run_nodes

    chosen = next((p for p in PARTS if p == part), None)
    if chosen is None:
        raise typer.BadParameter(f"one of {', '.join(PARTS)}", param_hint="--part")

    setup_logging(log_level)
    spec = NodesSpec(nodes=nodes, devices=devices, kubeconfig=kubeconfig, nats_url=nats, prefix=prefix,
                     nats_replicas=nats_replicas,
                     split_count=split_count, pod_duration=pod_duration, metrics_port=metrics_port,
                     metrics_bind=metrics_bind, heartbeat_s=heartbeat, admissions_log=admissions_log,
                     ready_file=ready_file,
                     monitor_interval_s=monitor_interval, normal_events=normal_events,
                     pod_log_dir=pod_log_dir, part=chosen, hosts_dir=hosts_dir, node_identity=node_identity)
    _run_uvloop(run_nodes(spec), profile)


def _run_uvloop(main: Coroutine[Any, Any, None], profile: Path | None = None) -> None:
    """uvloop where available (the simulator is the CPU-bound part); optionally under cProfile."""
    try:
        import uvloop
        runner: Callable[[Coroutine[Any, Any, None]], None] = uvloop.run
    except ImportError:
        runner = asyncio.run
    if profile is None:
        runner(main)
        return
    import cProfile

    profiler = cProfile.Profile()
    try:
        profiler.runcall(runner, main)
    finally:
        profiler.dump_stats(str(profile))
