"""``gpubus submit``, ``gpubus get pods`` and ``gpubus snapshot``: commands against any cluster.

A kubeconfig (by default the one ``gpubus up`` writes) or a NATS URL names the cluster. Option
parsing and printing only; the work is in :mod:`gpubus.submit` and :mod:`gpubus.snapshot`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

import typer

from gpubus import options
from gpubus.up_dir import DEFAULT_DATA_DIR, DEFAULT_KUBECONFIG, choose_nats_url
from shared.config import load_settings
from shared.errors import BadInput, BusUnavailable, GpubusError

MAX_SUBMIT_COUNT = 10_000
"""Most copies ``gpubus submit --count`` makes of each Pod in the file."""

Opt = typer.Option
KubeconfigOpt = Annotated[Path, Opt(envvar="GPUBUS_KUBECONFIG",
                                    help="Kubeconfig (default: the one `gpubus up` writes).")]


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)
    get = typer.Typer(name="get", help="Show objects of the cluster (a small kubectl get).",
                      no_args_is_help=True)
    get.command("pods")(get_pods)
    app.add_typer(get)
    app.command("snapshot")(snapshot)


def submit(
    pod_file: Annotated[Path, typer.Argument(help="Pod manifest (YAML, may hold several Pods).")],
    count: Annotated[int, Opt(min=1, max=MAX_SUBMIT_COUNT,
                              help="Create this many copies (names become generateName).")] = 1,
    kubeconfig: KubeconfigOpt = DEFAULT_KUBECONFIG,
    namespace: Annotated[str, Opt("--namespace", "-n", help="Namespace of pods that name none.")] = "default",
    timeout: Annotated[float, Opt(callback=options.positive_seconds,
                                  help="Stop creating and waiting after this many seconds.")] = 120.0,
) -> None:
    """Create pods, show progress while they schedule, and summarise (phases, reasons, submit->Running)."""
    from gpubus.submit import SubmitOptions, load_pods
    from gpubus.submit import submit as run_submit

    try:
        pods = load_pods(pod_file, count)
        options = SubmitOptions(kubeconfig=kubeconfig, namespace=namespace, timeout_s=timeout)
        tracker, errors = asyncio.run(run_submit(pods, options, typer.echo))
    except (BadInput, GpubusError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if len(tracker.pods) + len(errors) < len(pods):
        typer.echo(f"created {len(tracker.pods)} of {len(pods)} pods before --timeout")
    for line in tracker.summary():
        typer.echo(line)
    for error in errors[:5]:
        typer.echo(f"create failed: {error}", err=True)
    started = sum(1 for t in tracker.pods.values() if t.running_at is not None)
    raise typer.Exit(0 if started == len(pods) else 1)


def get_pods(
    output: Annotated[str, Opt("--output", "-o", help="wide or json.")] = "",
    namespace: Annotated[str, Opt("--namespace", "-n", help="Namespace.")] = "default",
    all_namespaces: Annotated[bool, Opt("--all-namespaces", "-A", help="Every namespace.")] = False,
    kubeconfig: KubeconfigOpt = DEFAULT_KUBECONFIG,
) -> None:
    """Pods with their phase, node and the GPU slices they hold (hami.io/vgpu-devices-allocated)."""
    from gpubus.submit import get_pods as run_get

    if output not in ("", "wide", "json"):
        typer.echo("error: -o must be wide or json", err=True)
        raise typer.Exit(2)
    try:
        typer.echo(asyncio.run(run_get(kubeconfig, namespace=None if all_namespaces else namespace,
                                       output=output)))
    except (BadInput, GpubusError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


def snapshot(
    nats: Annotated[str | None, Opt(callback=options.nats_url, help="NATS URL (env GPUBUS_BUS_URL; "
                                    "default: the running `gpubus up`'s).")] = None,
    data_dir: Annotated[Path, Opt(help="The `gpubus up` data dir whose NATS to use without --nats or "
                                       "GPUBUS_BUS_URL.")] = DEFAULT_DATA_DIR,
) -> None:
    """Print the live cluster (inventory + ledger) as CLUSTER.json for `gpubus explain --cluster`."""
    import json

    from gpubus.snapshot import snapshot as take
    from shared.bus import BusSettings

    chosen = choose_nats_url(nats, os.environ, data_dir.expanduser())
    settings = load_settings(BusSettings, cli={"url": chosen.url, "name": "gpubus-snapshot",
                                               "initial_connect_timeout_s": 5.0}, env_prefix="GPUBUS_BUS_")
    problem = options.nats_url_problem(settings.url)
    if problem is not None:  # the URL may come from GPUBUS_BUS_URL or the data dir: no callback saw it
        typer.echo(f"error: {chosen.source}: {problem}", err=True)
        raise typer.Exit(2)
    try:
        data = asyncio.run(take(settings))
    except BusUnavailable as e:
        typer.echo(f"error: {e} (the URL from {chosen.source})", err=True)
        raise typer.Exit(1) from None
    except GpubusError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(data, indent=1))
