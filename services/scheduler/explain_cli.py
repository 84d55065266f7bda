"""``gpubus explain --cluster CLUSTER.json --pod POD.yaml [--json]``: the edge around explain.py.

Reads the two files, calls the pure core, prints. Exit 0 when some node fits, 1 when none does,
2 on bad input with one line naming the field (never a traceback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml

from services.scheduler.explain import explain, load_cluster, render_table
from services.scheduler.fit import Policies
from services.scheduler.score import GpuPolicy, NodePolicy, policy_chain
from shared.errors import BadInput
from shared.requests import pod_request


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
    nodes = load_cluster(_load_cluster(cluster))
    manifest = _load_pod(pod)
    request = pod_request(manifest)
    report = explain(nodes, request, policy)
    code = 0 if report["chosen"] is not None else 1
    if as_json:
        return code, json.dumps(report)
    return code, render_table(report, f"{request.namespace}/{request.name}")


def register_explain(app: typer.Typer) -> None:
    """Add ``gpubus explain`` to the CLI."""

    @app.command("explain")
    def explain_command(
        cluster: Annotated[
            Path, typer.Option("--cluster", help="CLUSTER.json snapshot (nodes, devices, usage).")
        ],
        pod: Annotated[
            Path, typer.Option("--pod", help="Pod manifest (YAML or JSON), annotations included.")
        ],
        as_json: Annotated[bool, typer.Option("--json", help="Print the machine-readable report.")] = False,
        node_policy: Annotated[str, typer.Option(help="Default node policy (binpack|spread).")] = "binpack",
        gpu_policy: Annotated[str, typer.Option(help="Default GPU policy (spread|binpack|...).")] = "spread",
    ) -> None:
        """Why is my pod Pending? Run the scheduler's filter and score on a snapshot."""
        try:
            code, text = run_explain(cluster, pod, as_json=as_json, policy=policies(node_policy, gpu_policy))
        except BadInput as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        typer.echo(text)
        raise typer.Exit(code)
