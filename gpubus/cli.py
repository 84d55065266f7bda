"""The ``gpubus`` command: one entry point, one sub-command per service or tool.

This is the composition root of the CLI only: each service contributes its commands through
``services.<svc>.cli.register(app)``; nothing here knows how a service works. Other packages add
theirs through the ``gpubus.commands`` entry point group (the local world's ``gpubus up`` and its
stand-ins, package ``gpubus_local``), so the product never imports them; a package an entry point
names but this install lacks (the production image leaves the local world out) adds nothing, and
``gpubus <its command>`` says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

import typer
import typer.main

from gpubus import cluster_cli, schema_cli, tap_cli
from services.authn import cli as authn_cli
from services.dashboard import cli as dashboard_cli
from services.monitor import cli as monitor_cli
from services.node_agent import cli as node_agent_cli
from services.scheduler import cli as scheduler_cli
from services.webhook import cli as webhook_cli

ENTRY_POINTS = "gpubus.commands"
"""Entry point group: each names a ``register(app: typer.Typer) -> None``."""

_absent: list[str] = []
"""Packages that entry points name and this install lacks (said when a command is not found)."""
ABSENT_HINT = ("{packages}: not installed here, so neither are its commands (the local world, `gpubus up`: "
               "pip install -e '.[sim]' in a checkout, or the sim image)")


app = typer.Typer(
    name="gpubus",
    help="Kubernetes GPU sharing (HAMi-compatible) as event-driven services on NATS.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

@app.callback()
def _root() -> None:
    """Kubernetes GPU sharing (HAMi-compatible) as event-driven services on NATS."""
    # A callback keeps `gpubus <command>` a group even while only one command is registered.


#: Modules that contribute commands; each has ``register(app: typer.Typer) -> None``.
COMMAND_MODULES = (webhook_cli, scheduler_cli, node_agent_cli, monitor_cli, dashboard_cli, authn_cli,
                   tap_cli, schema_cli, cluster_cli)


def _load(entry: EntryPoint) -> Callable[[typer.Typer], None] | None:
    """The entry point's ``register``; None when its package is not installed (any other import
    failure is a broken install and raises)."""
    try:
        register: Callable[[typer.Typer], None] = entry.load()
    except ModuleNotFoundError as e:
        if e.name is None or not (entry.module == e.name or entry.module.startswith(f"{e.name}.")):
            raise
        _absent.append(entry.module.partition(".")[0])
        return None
    return register


def _register_all() -> None:
    for module in COMMAND_MODULES:
        module.register(app)
    for entry in entry_points(group=ENTRY_POINTS):
        register = _load(entry)
        if register is not None:
            register(app)


_register_all()


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else "-"
    if _absent and not command.startswith("-") and command not in _commands():
        typer.secho(ABSENT_HINT.format(packages=", ".join(_absent)), fg="red", err=True)
    app()


def _commands() -> set[str]:
    group = typer.main.get_command(app)
    return set(getattr(group, "commands", {}))


if __name__ == "__main__":
    main()
