"""The nats-server configuration that turns the auth callout on (server configuration mode).

Three accounts: ``AUTH`` holds the callout service's own user, ``GPUBUS`` the stream, the buckets
and every gpubus client (role users configured here, node identities placed there by the callout),
``SYS`` the system user. ``authorization.auth_callout`` names the issuer account key whose
signatures the server trusts and the static users it lets in without asking (``auth_users``);
everyone else, every node, goes to the callout. The Helm chart renders the same shape.
Pure: returns text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

AUTH_ACCOUNT = "AUTH"
APP_ACCOUNT = "GPUBUS"
SYS_ACCOUNT = "SYS"


@dataclass(frozen=True, slots=True, kw_only=True)
class CalloutConfig:
    issuer: str
    """The issuer account's public nkey (``A...``)."""
    callout_user: str
    callout_password: str
    roles: Mapping[str, str] = field(default_factory=dict)
    """Role users of the ``GPUBUS`` account (scheduler, webhook, tap...) and their passwords."""
    sys_password: str = ""
    """The ``SYS`` account's user ``sys``; empty leaves it out."""
    auth_timeout_s: float = 2.0
    """How long the server waits for a client's CONNECT and for the callout's answer."""
    no_auth_user: str = ""
    """A role user that clients without credentials become (``gpubus up`` only: local tools)."""

    def __repr__(self) -> str:
        return f"CalloutConfig(issuer={self.issuer}, roles={sorted(self.roles)})"  # no passwords


def _user(name: str, password: str) -> str:
    return f"{{ user: {json.dumps(name)}, password: {json.dumps(password)} }}"


def render(config: CalloutConfig) -> str:
    """The ``accounts``/``authorization`` part of a nats-server config (listen and JetStream
    come from the command line or the rest of the file)."""
    roles = ", ".join(_user(name, pw) for name, pw in sorted(config.roles.items()))
    static = [config.callout_user, *sorted(config.roles)]
    sys_block = ""
    if config.sys_password:
        static.append("sys")
        sys_block = f"  {SYS_ACCOUNT} {{ users: [ {_user('sys', config.sys_password)} ] }}\n"
    lines = [
        "accounts {",
        f"  {AUTH_ACCOUNT} {{ users: [ {_user(config.callout_user, config.callout_password)} ] }}",
        f"  {APP_ACCOUNT} {{ jetstream: enabled, users: [ {roles} ] }}",
        sys_block.rstrip("\n"),
        "}",
        f"system_account: {SYS_ACCOUNT}" if config.sys_password else "",
        f"no_auth_user: {json.dumps(config.no_auth_user)}" if config.no_auth_user else "",
        "authorization {",
        f"  timeout: {config.auth_timeout_s:g}",
        "  auth_callout {",
        f"    issuer: {json.dumps(config.issuer)}",
        f"    account: {AUTH_ACCOUNT}",
        f"    auth_users: [ {', '.join(json.dumps(u) for u in static)} ]",
        "  }",
        "}",
    ]
    return "\n".join(line for line in lines if line) + "\n"
