"""The ``gpubus`` command: one entry point, one sub-command per service or tool.

This is the composition root of the CLI only: each service contributes its commands through
``services.<svc>.cli.register(app)``; nothing here knows how a service works.
"""

from __future__ import annotations

import importlib

import typer

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
    "services.sim.cli",
    "gpubus.tap_cli",
    "gpubus.stack_cli",
)


def _register_all() -> None:
    for module in COMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue  # during development not every module exists yet
        mod.register(app)


_register_all()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
