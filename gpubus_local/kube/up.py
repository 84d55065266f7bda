"""``gpubus up --control-plane kubernetes``: start a :class:`KubeStack`, print where it is, serve until
Ctrl-C (or a part dies), stop everything. Printing and signals only; the work is in :mod:`.stack`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import typer

from gpubus_local.kube.binaries import BinariesMissing
from gpubus_local.kube.stack import KubeStack, KubeStackSpec
from gpubus_local.natsserver import NatsServerError
from gpubus_local.stack import StackError
from gpubus_local.stack_datadir import DataDirBusy, DataDirError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def up_kubernetes(spec: KubeStackSpec) -> int:
    """Run the stack until a stop signal; the exit code ``gpubus up`` returns."""
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_serve(spec))
    return 130


async def _serve(spec: KubeStackSpec) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    stack = KubeStack(spec)
    typer.echo(f"starting gpubus on the real Kubernetes control plane in {spec.mode} mode: {spec.nodes} nodes"
               f" x {spec.devices} (data in {stack.data_dir}; a cold build of the binaries takes tens of"
               " minutes)")
    try:
        starting = asyncio.create_task(stack.start(), name="kube-stack-start")
        stopping = asyncio.create_task(stop.wait(), name="kube-stack-stop")
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            typer.echo("interrupted while starting; stopping")
            await asyncio.gather(starting, return_exceptions=True)
            return 130
        starting.result()
        _print_endpoints(stack)
        watching = asyncio.create_task(stack.watch(), name="kube-stack-watch")
        await asyncio.wait([watching, stopping], return_when=asyncio.FIRST_COMPLETED)
        if watching.done():
            name, code = watching.result()
            typer.secho(f"\n{name} died (exit code {code}); stopping everything (logs: {stack.data_dir})",
                        fg="red", err=True)
            return 1
        watching.cancel()
        typer.echo("\nstopping gpubus ...")
        return 0
    except DataDirError as e:
        typer.secho(f"gpubus up: {e}", fg="red", err=True)
        return 2
    except (StackError, NatsServerError, DataDirBusy, BinariesMissing, OSError, TimeoutError) as e:
        typer.secho(f"gpubus up failed: {e}", fg="red", err=True)
        return 1
    finally:
        await stack.stop()


def _print_endpoints(stack: KubeStack) -> None:
    how = ("DRA: claims allocated by kube-scheduler" if stack.spec.mode == "dra"
           else "extender: scheduler extender and device plugin")
    typer.secho(f"gpubus is up on Kubernetes v1.37 (real API server, kube-scheduler and kubelets; {how})",
                fg="green", bold=True)
    for what, where in stack.endpoints().items():
        typer.echo(f"  {what:<16} {where}")
    kubectl = stack.binaries["kubectl"] if stack.binaries is not None else Path("kubectl")
    typer.echo(f"\ntry:\n  {kubectl} --kubeconfig {stack.kubeconfig} create -f examples/pod-small.yaml"
               f"\n  {kubectl} --kubeconfig {stack.kubeconfig} get pods -A -o wide\nCtrl-C stops everything.")
