"""``gpubus up``: bring up the local world (embedded NATS, the stand-ins, every service) and watch it.

Option parsing and printing only; the work is in :mod:`gpubus_local.stack`. The children are
``python -m gpubus <command>``: the services' own commands and the stand-ins' hidden ones
(:mod:`gpubus_local.sim.cli`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from gpubus import options
from gpubus.up_dir import DEFAULT_DATA_DIR, DEFAULT_KUBECONFIG
from gpubus_local import up_options
from gpubus_local.banner import Hints, cli_command, example_path, hint_lines
from gpubus_local.natscluster import MAX_SERVERS
from gpubus_local.natsserver import DEFAULT_PORT, NatsServerError
from gpubus_local.stack import (
    DEFAULT_PORT_BASE,
    MAX_PORT,
    MAX_PORT_BASE,
    Stack,
    StackError,
    StackSpec,
)
from gpubus_local.stack_datadir import DataDirBusy, DataDirError
from gpubus_local.stack_supervise import CrashLoop, Supervisor, stack_parts
from services.node_agent.settings import MAX_SPLIT_COUNT
from shared.bus.settings import MAX_REPLICAS
from shared.logs import setup_logging
from shared.tasks import cancel_and_wait

MAX_NODES = 1000
"""Most simulated nodes of one ``gpubus up``: all of them run in one process on one machine
(``bench/e2e.py`` runs 100 on 2 cores); past this, memory and start-up time are what grow."""
CHECKOUT = Path(__file__).resolve().parents[1]
"""The source tree this package runs from (examples/ lives there in a checkout)."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each stops ``gpubus up`` and everything it started: the children run in sessions of their own,
so a closed terminal (SIGHUP) reaches only ``up`` itself."""


class LogLevel(StrEnum):
    """Log levels of the stack's children."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

class SharingMode(StrEnum):
    """How pods get GPU slices on the real control plane (the chart's ``mode``)."""

    EXTENDER = "extender"
    DRA = "dra"


class ControlPlaneKind(StrEnum):
    """What plays Kubernetes in ``gpubus up``."""

    SIM = "sim"
    KUBERNETES = "kubernetes"


Opt = typer.Option


def register(app: typer.Typer) -> None:
    app.command("up")(up)


# -- up ------------------------------------------------------------------------------------------

def up(  # noqa: PLR0917 - typer maps parameters to the command line
    nodes: Annotated[int, Opt(min=1, max=MAX_NODES, help="Simulated nodes.")] = 4,
    devices: Annotated[str, Opt(callback=up_options.device_spec,
                                help="Simulated GPUs per node, e.g. 4xA100-80GB or 8xH100-80GB.")]
    = "4xA100-80GB",
    nats: Annotated[str | None, Opt(callback=options.nats_url,
                                    help="Use this NATS URL instead of starting one.")] = None,
    nats_port: Annotated[int, Opt(min=0, max=MAX_PORT, help="Port of the embedded NATS (0 = any).")]
    = DEFAULT_PORT,
    nats_cluster: Annotated[int, Opt(min=1, max=MAX_SERVERS,
                                     help="Embedded NATS servers: 3 runs a JetStream cluster on ports "
                                          "--nats-port, +1, +2 (replicas default to 3).")] = 1,
    nats_replicas: Annotated[int | None, Opt(min=1, max=MAX_REPLICAS,
                                             help="Copies of the event stream and KV buckets "
                                                  "(default: 3 on a cluster, else 1).")] = None,
    data_dir: Annotated[Path, Opt(parser=up_options.data_dir, metavar="DIR",
                                  help="State, logs, certificates and kubeconfig.")] = DEFAULT_DATA_DIR,
    port_base: Annotated[int, Opt(min=0, max=MAX_PORT_BASE,
                                  help="API server port; webhook +1, extender +2, metrics +3 (0 = any).")]
    = DEFAULT_PORT_BASE,
    split_count: Annotated[int, Opt(min=1, max=MAX_SPLIT_COUNT, help="Containers that may share one GPU.")]
    = 10,
    pod_duration: Annotated[str, Opt(help="Pod run time without gpubus.io/sim-duration (inf = forever).")]
    = "60s",
    log_level: Annotated[LogLevel, Opt(case_sensitive=False, help="Log level of the children.")]
    = LogLevel.INFO,
    fresh: Annotated[bool, Opt(help="Forget events and state of an earlier run in --data-dir.")] = False,
    single_node_filter: Annotated[bool, Opt(
        help="HAMi mode: the extender's filter returns only the best node, so kube-scheduler skips "
             "/prioritize.")] = False,
    node_identity: Annotated[bool, Opt(
        help="Each node-agent connects to NATS as its own node (auth callout, `gpubus authn`); "
             "needs the embedded NATS.")] = True,
    control_plane: Annotated[ControlPlaneKind, Opt(
        case_sensitive=False,
        help="sim: the stand-in API server, kube-scheduler and kubelets (fast, nothing to build); "
             "kubernetes: the real v1.37 etcd, kube-apiserver, kube-scheduler and kubelets, built "
             "once by scripts/kube-build, with the Helm chart installed by the real helm.")]
    = ControlPlaneKind.SIM,
    mode: Annotated[SharingMode, Opt(
        case_sensitive=False,
        help="With --control-plane kubernetes: extender (HAMi's way: scheduler extender and device "
             "plugin) or dra (each GPU a DRA device with consumable memory and cores; kube-scheduler "
             "allocates claims, the webhook turns nvidia.com/gpu limits into claims).")]
    = SharingMode.EXTENDER,
) -> None:
    """Bring up a whole simulated GPU cluster on this machine: NATS, API server, webhook, scheduler, nodes."""
    setup_logging("info")
    if control_plane == ControlPlaneKind.KUBERNETES:
        raise typer.Exit(_up_kubernetes(nodes=nodes, devices=devices, data_dir=data_dir, nats=nats,
                                        nats_port=nats_port, split_count=split_count, log_level=log_level,
                                        mode=mode))
    if mode != SharingMode.EXTENDER:
        raise typer.BadParameter("DRA mode needs the real kube-scheduler and kubelets: add "
                                 "--control-plane kubernetes", param_hint="'--mode'")
    if nats_port and nats_port + nats_cluster - 1 > MAX_PORT:
        raise typer.BadParameter(f"a cluster of {nats_cluster} listens on --nats-port and the next ports: "
                                 f"{nats_port} leaves too few", param_hint="'--nats-port'")
    if nats is not None and nats_cluster > 1:
        raise typer.BadParameter("--nats-cluster starts embedded servers, --nats uses yours: give one",
                                 param_hint="'--nats-cluster'")
    spec = StackSpec(data_dir=data_dir, nodes=nodes, devices=devices, nats_url=nats, nats_port=nats_port,
                     nats_cluster=nats_cluster, nats_replicas=nats_replicas,
                     port_base=port_base, split_count=split_count, pod_duration=pod_duration,
                     log_level=log_level.value, fresh=fresh, single_node_filter=single_node_filter,
                     node_identity=node_identity)
    with contextlib.suppress(KeyboardInterrupt):
        code = asyncio.run(_up(spec))
        raise typer.Exit(code)


def _up_kubernetes(*, nodes: int, devices: str, data_dir: Path, nats: str | None, nats_port: int,
                   split_count: int, log_level: LogLevel, mode: SharingMode) -> int:
    """``--control-plane kubernetes`` (:mod:`gpubus_local.kube.up`): the options that apply there."""
    if nats is not None:
        raise typer.BadParameter("the real control plane runs its own embedded NATS (per-node identity)",
                                 param_hint="'--nats'")
    from gpubus_local.kube.stack import KubeStackSpec
    from gpubus_local.kube.up import up_kubernetes
    return up_kubernetes(KubeStackSpec(data_dir=data_dir, nodes=nodes, devices=devices, nats_port=nats_port,
                                       split_count=split_count, log_level=log_level.value, mode=mode.value))


async def _up(spec: StackSpec) -> int:
    """Orchestration: start, serve (restarting what dies) until a stop signal or a crash loop,
    then stop everything."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    stack = Stack(spec)
    typer.echo(f"starting gpubus: {spec.nodes} nodes x {spec.devices} (data in {stack.data_dir})")
    try:
        starting = asyncio.create_task(stack.start(), name="stack-start")
        stopping = asyncio.create_task(stop.wait(), name="stack-stop")
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            typer.echo("interrupted while starting; stopping")
            await asyncio.gather(starting, return_exceptions=True)  # start() undoes what it began
            return 130
        starting.result()
        _print_endpoints(stack)
        supervisor = Supervisor(stack_parts(stack),
                                report=lambda line: typer.echo(f"gpubus up: {line}", err=True))
        watching = asyncio.create_task(supervisor.run(), name="stack-supervise")
        await asyncio.wait([watching, stopping], return_when=asyncio.FIRST_COMPLETED)
        if watching.done():  # only a crash loop ends the supervisor
            loop_error = watching.exception()
            name = loop_error.name if isinstance(loop_error, CrashLoop) else "the supervisor"
            typer.secho(f"\n{loop_error}; stopping everything", fg="red", err=True)
            child = stack.children.get(name)
            if child is not None:
                typer.echo(child.log_tail(), err=True)
            return 1
        await cancel_and_wait(watching)  # before the children stop: nothing is restarted any more
        typer.echo("\nstopping gpubus ...")
        return 0
    except DataDirError as e:
        typer.secho(f"gpubus up: {e}", fg="red", err=True)
        return 2
    except (StackError, NatsServerError, DataDirBusy, OSError) as e:
        typer.secho(f"gpubus up failed: {e}", fg="red", err=True)
        return 1
    finally:
        started = stack.nats is not None or any(c.starts for c in stack.children.values())
        await stack.stop()
        if started:
            typer.echo("stopped")


def _print_endpoints(stack: Stack) -> None:
    typer.secho("gpubus is up", fg="green", bold=True)
    for what, where in stack.endpoints().items():
        typer.echo(f"  {what:<16} {where}")
    hints = Hints(command=cli_command(os.environ, shutil.which("gpubus"), sys.executable),
                  data_dir=stack.data_dir, default_data_dir=DEFAULT_DATA_DIR.resolve(),
                  kubeconfig=stack.kubeconfig, default_kubeconfig=DEFAULT_KUBECONFIG.resolve(),
                  example=example_path(Path.cwd(), CHECKOUT))
    typer.echo("\ntry:")
    for line in hint_lines(hints):
        typer.echo(line)
    typer.echo("Ctrl-C stops everything.")
