"""Bus settings and how they become nats-py connect options (credentials, TLS, reconnect).

Owns the one place where secrets are turned into connection options; it must never log or
``repr`` them. It knows nothing about streams, buckets or events.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.bus.scope import node_inbox_prefix
from shared.errors import BusRefused

log = logging.getLogger(__name__)

#: JetStream keeps at most this many copies of a stream (an odd number of RAFT peers, 1..5).
MAX_REPLICAS = 5
#: Where the replicas setting comes from, for error messages.
REPLICAS_SETTING = "replicas (GPUBUS_BUS_REPLICAS / --nats-replicas)"

_SECRET_FIELDS = frozenset({"password", "token"})
_FILE_FIELDS = ("creds_file", "nkey_seed_file", "token_file", "tls_ca", "tls_cert", "tls_key")
_URL_USERINFO = re.compile(r"(?<=://)[^@/]*@")


@dataclass(frozen=True, slots=True, kw_only=True)
class BusSettings:
    """How to reach NATS and how big the event history may grow."""

    url: str = "nats://127.0.0.1:4222"
    """One server URL or several separated by commas (``nats://``, ``tls://``)."""
    name: str = "gpubus"
    """Connection name shown by the server's monitoring (``connz``)."""
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None
    """Path to a ``.creds`` file (JWT + nkey seed) for decentralised auth."""
    nkey_seed_file: str | None = None
    """Path to a file holding an nkey user seed (``SU...``)."""
    token_file: str | None = None
    """Path to a bearer token sent as CONNECT ``auth_token``, re-read at every (re)connect: a node's
    projected service-account token, which the kubelet rotates and NATS's auth callout checks.
    With it a refused connection is retried (the callout may be down), not fatal."""
    node: str | None = None
    """This connection speaks for this node only (per-node identity): replies come to
    ``_INBOX_<node>``, consumers are made one filter each, and the schema is left to the roles."""
    tls_ca: str | None = None
    """CA bundle that signed the server certificate; enables TLS."""
    tls_cert: str | None = None
    """Client certificate for mutual TLS (with ``tls_key``)."""
    tls_key: str | None = None
    tls_hostname: str | None = None
    """Server name to verify when it differs from the URL host."""
    connect_timeout_s: float = 2.0
    """Timeout of one TCP/TLS connect attempt, seconds."""
    initial_connect_timeout_s: float = 30.0
    """How long :meth:`Bus.connect` keeps trying before it raises ``BusUnavailable``; 0 = forever."""
    reconnect_wait_s: float = 1.0
    """Pause between reconnect attempts, seconds (reconnect never gives up)."""
    request_timeout_s: float = 2.0
    """Timeout of one JetStream API call or publish acknowledgement, seconds."""
    stream_max_age_s: float = 24 * 3600.0
    """Event history kept in the ``GPUBUS`` stream, seconds (default one day)."""
    stream_max_bytes: int = 1 << 30
    """Upper bound of the ``GPUBUS`` stream on disk, bytes (oldest events go first)."""
    duplicate_window_s: float = 120.0
    """Window in which a repeated ``Nats-Msg-Id`` is dropped, seconds."""
    max_consumers: int = 16_384
    """Consumers each stream (``GPUBUS`` and every bucket) may hold. nats-server 2.15 caps a stream
    that sets none at 1000 (``default_max_consumers``); per-node identity gives every node its own
    consumers on ``GPUBUS`` (the node-agent 1, its monitor 3), so 1000 nodes hold about 4000 there.
    This bound still stops a runaway client, at ~4000 nodes; raise it beyond that."""
    allocations_history: int = 3
    """Revisions kept per key in the ``allocations`` bucket (1..64)."""
    lock_ttl_s: float = 30.0
    """Bucket TTL of ``locks``: the longest a lease lives without renewal, seconds."""
    outbox_limit: int = 10_000
    """Events :meth:`Bus.emit` buffers while NATS is down; the oldest are dropped beyond it."""
    flush_timeout_s: float = 5.0
    """How long :meth:`Bus.close` tries to send what is left in the outbox, seconds."""
    failover_s: float = 10.0
    """How long a KV write, a bucket snapshot or :meth:`Bus.publish_in_order` keeps trying through
    the loss of a NATS server (a stream electing a new leader answers "no responders" or nothing
    for a few seconds; a client moves to another server) before it raises ``BusUnavailable``.
    Above JetStream's election time (4-9 s after a leader dies) and below the scheduler's bind
    budget (25 s), seconds."""
    replicas: int = 1
    """Copies JetStream keeps of the ``GPUBUS`` stream and of every KV bucket (1..5; env
    ``GPUBUS_BUS_REPLICAS``, flag ``--nats-replicas``). 1 on a single server; 3 on a 3-server
    cluster, so losing any one server loses nothing and stops nothing. Existing streams with fewer
    are raised to it at start; a cluster with fewer servers than this refuses to start us."""

    def __repr__(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _SECRET_FIELDS and value is not None:
                value = "***"
            elif f.name == "url":
                value = redact_url(value)
            parts.append(f"{f.name}={value!r}")
        return f"BusSettings({', '.join(parts)})"

    __str__ = __repr__


def redact_url(url: str) -> str:
    """``nats://user:pass@host`` -> ``nats://***@host`` (for logs)."""
    return _URL_USERINFO.sub("***@", url)


def servers(settings: BusSettings) -> list[str]:
    return [u.strip() for u in settings.url.split(",") if u.strip()]


def check_settings(settings: BusSettings) -> None:
    """Refuse settings that cannot work, naming the field, before any connect attempt."""
    for name in _FILE_FIELDS:
        path = getattr(settings, name)
        if path is not None and not Path(path).is_file():
            raise BusRefused(f"bus setting {name}: no such file: {path}")
    if settings.tls_key and not settings.tls_cert:
        raise BusRefused("bus setting tls_key: given without tls_cert")
    if (settings.creds_file or settings.nkey_seed_file) and importlib.util.find_spec("nkeys") is None:
        raise BusRefused("bus settings creds_file/nkey_seed_file need the 'nkeys' package (nats-py[nkeys])")
    if not servers(settings):
        raise BusRefused("bus setting url: no server URL given")
    if not 1 <= settings.replicas <= MAX_REPLICAS:
        raise BusRefused(f"bus setting {REPLICAS_SETTING}: {settings.replicas} is not in 1..{MAX_REPLICAS}")


def tls_context(settings: BusSettings) -> ssl.SSLContext | None:
    """A client TLS context when any TLS file is configured, else None (BusRefused on a bad file)."""
    if not (settings.tls_ca or settings.tls_cert):
        return None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.tls_ca)
    except ssl.SSLError as e:
        raise BusRefused(f"bus setting tls_ca: not a usable CA bundle: {e}") from e
    if settings.tls_cert:
        try:
            ctx.load_cert_chain(settings.tls_cert, settings.tls_key)
        except ssl.SSLError as e:
            raise BusRefused(f"bus setting tls_cert/tls_key: not a usable certificate and key: {e}") from e
    return ctx


def connect_options(settings: BusSettings) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect`` (callbacks are added by the caller)."""
    opts: dict[str, Any] = {
        "servers": servers(settings),
        "name": settings.name,
        "connect_timeout": settings.connect_timeout_s,
        "reconnect_time_wait": settings.reconnect_wait_s,
        "max_reconnect_attempts": -1,
        "allow_reconnect": True,
    }
    optional = {
        "user": settings.user,
        "password": settings.password,
        "token": _token_reader(settings.token_file) if settings.token_file else settings.token,
        "user_credentials": settings.creds_file,
        "nkeys_seed": settings.nkey_seed_file,
        "inbox_prefix": node_inbox_prefix(settings.node) if settings.node else None,
        "tls_hostname": settings.tls_hostname,
        "tls": tls_context(settings),
    }
    opts.update({k: v for k, v in optional.items() if v is not None})
    return opts


def _token_reader(path: str) -> Callable[[], str]:
    """nats-py calls this at every CONNECT, so a rotated token file is picked up on reconnect."""
    def read() -> str:
        try:
            return Path(path).read_text().strip()
        except OSError as e:
            # nats-py sends what we return; an empty token is refused like a wrong one, and retried
            log.warning("bus setting token_file: cannot read %s: %s", path, e)
            return ""
    return read
