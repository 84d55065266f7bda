"""Checks a deployment's command lines against the real ``gpubus`` CLI without running anything.

Each service command is looked up in the typer app and the arguments are parsed by typer's click exactly
as ``gpubus <service> ...`` would parse them, stopping before the command runs: an unknown flag,
a missing value or a value of the wrong type fails here, not in a pod's crash loop.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import typer

from gpubus.cli import app

#: Kubernetes expands ``$(VAR)`` in args and compose ``${VAR:-default}``; parse them as a value.
_VARIABLE = re.compile(r"\$\((\w+)\)|\$\{(\w+)(?::?-([^}]*))?\}")


def command(name: str) -> Any:
    """The click command behind ``gpubus <name>`` (typer bundles its own click), or None."""
    commands: dict[str, Any] = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    return commands.get(name)


def require_command(name: str) -> Any:
    """The command; the calling test fails when no module registered it (the sim-* commands need
    the simulator installed: ``pip install 'gpubus[sim]'``)."""
    found = command(name)
    assert found is not None, f"`gpubus {name}` is not a command of the gpubus CLI"
    return found


def expand(arg: str) -> str:
    return _VARIABLE.sub(lambda m: m.group(3) or "node-1", arg)


def parse(name: str, args: Sequence[str]) -> dict[str, object]:
    """Parse ``args`` as ``gpubus <name>`` would; returns the parameters, raises click errors."""
    cmd = require_command(name)
    with cmd.make_context(f"gpubus {name}", [expand(a) for a in args]) as ctx:
        return dict(ctx.params)
