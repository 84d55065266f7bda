"""Checks of the gpubus commands' option values, run by typer before a command starts anything.

A bad value must fail at once with one line naming the option (typer's ``BadParameter``, exit 2),
not start a stack or a connection that fails later with a child's traceback. Knows the rules of
the values (timeouts, NATS URLs), nothing of what the commands do.
"""

from __future__ import annotations

import urllib.parse

import typer

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
