"""The ``gpubus schema`` command: write, check and publish the event contract (docs/events/).

``write`` renders the AsyncAPI document and JSON Schemas from the code; ``check`` fails when the
committed files are stale or when the code breaks a published major (the CI check); ``publish``
records the current contract as published (a release step). The contract itself is
:mod:`shared.contract`; this module only reads and writes files.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from shared.contract import breaks, contract
from shared.contract.files import PUBLISHED_FILE, SCHEMA_DIR, dump_json, merged_baseline, render

DirOption = Annotated[Path, typer.Option("--dir", help="The contract's folder.")]
DEFAULT_DIR = Path("docs/events")

schema_app = typer.Typer(help="The event stream's contract: AsyncAPI + JSON Schema (docs/events.md).",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(schema_app, name="schema")


def version() -> str:
    return importlib.metadata.version("gpubus")


def load_published(folder: Path) -> dict[str, Any]:
    """The baseline in ``folder`` ({} when none was published yet)."""
    path = folder / PUBLISHED_FILE
    if not path.exists():
        return {}
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def stale_files(folder: Path, files: dict[str, str]) -> list[str]:
    """Paths under ``folder`` that differ from ``files``, are missing, or are schema files no longer made."""
    stale = [name for name, text in files.items()
             if not (folder / name).is_file() or (folder / name).read_text() != text]
    schema_dir = folder / SCHEMA_DIR
    if schema_dir.is_dir():
        stale += [f"{SCHEMA_DIR}/{p.name}" for p in sorted(schema_dir.glob("*.json"))
                  if f"{SCHEMA_DIR}/{p.name}" not in files]
    return sorted(stale)


def write_files(folder: Path, files: dict[str, str]) -> None:
    (folder / SCHEMA_DIR).mkdir(parents=True, exist_ok=True)
    for p in (folder / SCHEMA_DIR).glob("*.json"):
        if f"{SCHEMA_DIR}/{p.name}" not in files:
            p.unlink()
    for name, text in files.items():
        (folder / name).write_text(text)


@schema_app.command("write")
def write(folder: DirOption = DEFAULT_DIR) -> None:
    """Write asyncapi.yaml and schemas/*.json from the event types."""
    write_files(folder, render(version(), load_published(folder)))
    typer.echo(f"wrote the contract to {folder}")


@schema_app.command("check")
def check(folder: DirOption = DEFAULT_DIR) -> None:
    """Fail when the committed contract is stale or the code breaks a published major."""
    failed = False
    for name in stale_files(folder, render(version(), load_published(folder))):
        typer.echo(f"stale: {folder / name} differs from what the code generates (run `gpubus schema write`)",
                   err=True)
        failed = True
    for found in breaks(load_published(folder), contract()):
        typer.echo(f"break: {found}", err=True)
        failed = True
    if failed:
        raise typer.Exit(1)
    typer.echo("the contract is current and compatible with every published major")


@schema_app.command("publish")
def publish(folder: DirOption = DEFAULT_DIR) -> None:
    """Record the current contract as published (keeps older majors), then write the files."""
    published = load_published(folder)
    found = breaks(published, contract())
    if found:
        for b in found:
            typer.echo(f"break: {b}", err=True)
        raise typer.Exit(1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PUBLISHED_FILE).write_text(dump_json(merged_baseline(published)))
    write_files(folder, render(version(), load_published(folder)))
    typer.echo(f"published {len(contract())} messages to {folder / PUBLISHED_FILE}")
