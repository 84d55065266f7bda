"""Checks of the gpubus commands' option values, run by typer before a command starts anything.

A bad value must fail at once with one line naming the option (typer's ``BadParameter``, exit 2),
not start a stack or a connection that fails later with a child's traceback. Knows the rules of
the values (timeouts, NATS URLs, device specs, data dirs), nothing of what the commands do.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import typer

from services.node_agent.errors import SimSpecError
from services.node_agent.simulated import parse_spec

#: URL schemes nats-py connects with.
NATS_SCHEMES = frozenset({"nats", "tls", "ws", "wss"})


def positive_seconds(value: float | None) -> float | None:
    """A timeout must be more than 0 seconds (``inf`` waits for ever); NaN compares false, so fails too."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not more than 0 seconds")
    return value


def nats_url_problem(url: str) -> str | None:
    """Why nats-py would refuse (or send to DNS) this comma-separated server list; None if it is fine."""
    servers = [u.strip() for u in url.split(",")]
    if not any(servers):
        return "no server URL given"
    for server in servers:
        problem = _server_problem(server)
        if problem is not None:
            return problem
    return None


def _server_problem(server: str) -> str | None:
    if not server:
        return "empty server URL in the list"
    if any(c.isspace() for c in server):
        return f"{server!r} contains whitespace"
    scheme, sep, _ = server.partition("://")
    if sep and scheme not in NATS_SCHEMES:
        return f"{server!r}: the scheme must be one of {', '.join(sorted(NATS_SCHEMES))}"
    try:
        parsed = urllib.parse.urlsplit(server if sep else f"nats://{server}")
        parsed.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError as e:
        return f"{server!r}: {e}"
    return None if parsed.hostname else f"{server!r} names no host"


def nats_url(value: str | None) -> str | None:
    """typer callback of ``--nats``."""
    if value is not None and (problem := nats_url_problem(value)) is not None:
        raise typer.BadParameter(problem)
    return value


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
