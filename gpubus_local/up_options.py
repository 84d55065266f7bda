"""Checks of ``gpubus up``'s option values, run by typer before the stack starts anything.

A bad value fails at once with one line naming the option (typer's ``BadParameter``, exit 2), not
with a child's traceback later. The general checks (NATS URLs, timeouts) are :mod:`gpubus.options`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from services.node_agent.errors import SimSpecError
from services.node_agent.simulated import parse_spec


def device_spec(value: str) -> str:
    """typer callback of ``up --devices``: the simulated nodes' own parser, so they never refuse it."""
    try:
        parse_spec(value)
    except SimSpecError as e:
        raise typer.BadParameter(str(e)) from None
    return value


def data_dir(value: str | Path) -> Path:
    """typer parser of ``up --data-dir``: an empty value would be the current directory (and
    ``--fresh`` would delete its ``nats/``), so it is refused; so is a path that is not a directory."""
    if isinstance(value, str) and not value.strip():
        raise typer.BadParameter("must not be empty (give a directory; the default is ~/.gpubus/up)")
    path = Path(value).expanduser()
    for existing in (path, *path.parents):  # the path itself, or the nearest part of it that exists
        try:
            if existing.exists():
                if not existing.is_dir():
                    raise typer.BadParameter(f"{existing} is not a directory")
                break
        except OSError:
            break  # not ours to read (say a permission): starting the stack says what is wrong
    return path
