"""The scheduler's CLI commands: ``gpubus explain`` (and, added by the service, ``gpubus scheduler``)."""

from __future__ import annotations

import typer

from services.scheduler.command import register_scheduler
from services.scheduler.explain_cli import register_explain


def register(app: typer.Typer) -> None:
    """Add the scheduler's commands to the ``gpubus`` app."""
    register_explain(app)
    register_scheduler(app)
