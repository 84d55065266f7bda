"""The local world's commands, registered with the ``gpubus`` CLI through the ``gpubus.commands``
entry point (pyproject.toml), so the product finds them without importing this package.

``gpubus up`` (:mod:`gpubus_local.stack_cli`) and the hidden process commands it starts
(:mod:`gpubus_local.sim.cli`: ``sim-control``, ``sim-kube-scheduler``, ``sim-nodes``).
"""

from __future__ import annotations

import typer

from gpubus_local import stack_cli
from gpubus_local.sim import cli as sim_cli


def register(app: typer.Typer) -> None:
    stack_cli.register(app)
    sim_cli.register(app)
