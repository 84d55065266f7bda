"""Process plumbing every ``gpubus <service>`` entry point does the same way.

How a command loads its NATS settings (env ``GPUBUS_BUS_*`` under the flags) and which port an
aiohttp runner really bound (``port=0`` in tests); how it runs and stops is :mod:`shared.lifetime`'s.
It must not know any service's settings, routes or metrics.
"""

from __future__ import annotations

from aiohttp import web

from shared.bus import BusSettings
from shared.config import load_settings

BUS_ENV_PREFIX = "GPUBUS_BUS_"


def load_bus_settings(
    name: str, *, url: str | None = None, creds_file: str | None = None, tls_ca: str | None = None,
    replicas: int | None = None,
) -> BusSettings:
    """BusSettings from the common ``--nats*`` flags over ``GPUBUS_BUS_*``; ``name`` is the client name."""
    cli = {"name": name, "url": url, "creds_file": creds_file, "tls_ca": tls_ca, "replicas": replicas}
    return load_settings(BusSettings, cli=cli, env_prefix=BUS_ENV_PREFIX)


def bound_port(runner: web.AppRunner, default: int = 0) -> int:
    """The TCP port the runner's first site listens on (useful when it was asked for port 0)."""
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    return default
