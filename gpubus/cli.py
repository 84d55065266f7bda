"""The ``gpubus`` command: one entry point, one sub-command per service or tool.

This is the composition root of the CLI only: each service contributes its commands through
``services.<svc>.cli.register(app)``; nothing here knows how a service works. The simulator's
process commands (``gpubus_sim.cli``) are added by name when the optional simulator is installed:
the product never imports it.
"""

from __future__ import annotations

import importlib

import typer

from gpubus import simulator

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
COMMAND_MODULES = (
    "services.webhook.cli",
    "services.scheduler.cli",
    "services.node_agent.cli",
    "services.monitor.cli",
    "services.dashboard.cli",
    "services.authn.cli",
    "gpubus.tap_cli",
    "gpubus.stack_cli",
)


def _register_all() -> None:
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(app)
    if simulator.installed():
        importlib.import_module(simulator.SIM_COMMANDS).register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
