"""Where a ``gpubus up`` stack leaves what the product's commands need to find it.

``gpubus submit`` and ``gpubus get pods`` read the kubeconfig the stack writes into its data dir,
``gpubus tap`` and ``gpubus snapshot`` the NATS URL it records there while it runs. The local world
(``gpubus_local``) writes these files and imports this module; the product reads them and never
imports the local world.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.bus import BusSettings

DEFAULT_DATA_DIR = Path.home() / ".gpubus" / "up"
DEFAULT_KUBECONFIG = DEFAULT_DATA_DIR / "kubeconfig"
NATS_URL_FILE = "nats.url"
"""In the data dir while a stack runs: the NATS URL its services use (an embedded server's port may be
any), so that ``gpubus tap`` and ``gpubus snapshot`` reach that NATS without being told."""
URL_ENV = "GPUBUS_BUS_URL"


@dataclass(frozen=True, slots=True)
class NatsUrl:
    """A NATS URL and where it came from, which an error about it names."""

    url: str
    source: str


def write_nats_url(data_dir: Path, url: str) -> None:
    """Record the running stack's NATS URL (whole or not at all: written aside, then renamed)."""
    aside = data_dir / f".{NATS_URL_FILE}.tmp"
    aside.write_text(url + "\n", encoding="utf-8")
    aside.replace(data_dir / NATS_URL_FILE)


def forget_nats_url(data_dir: Path) -> None:
    (data_dir / NATS_URL_FILE).unlink(missing_ok=True)


def recorded_nats_url(data_dir: Path) -> str | None:
    """The URL a running stack recorded in ``data_dir``; None if there is none (or it cannot be read)."""
    try:
        url = (data_dir / NATS_URL_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return url or None


def choose_nats_url(flag: str | None, environ: Mapping[str, str], data_dir: Path) -> NatsUrl:
    """``--nats``, else ``GPUBUS_BUS_URL``, else the URL a running ``gpubus up`` in ``data_dir``
    recorded, else the default."""
    if flag:
        return NatsUrl(flag, "--nats")
    if environ.get(URL_ENV):
        return NatsUrl(environ[URL_ENV], URL_ENV)
    recorded = recorded_nats_url(data_dir)
    if recorded is not None:
        return NatsUrl(recorded, f"the running `gpubus up` ({data_dir / NATS_URL_FILE})")
    return NatsUrl(BusSettings().url, "the default; start `gpubus up`, or give --nats or GPUBUS_BUS_URL")
