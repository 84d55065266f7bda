"""The serving certificate: an SSLContext whose chain is reloaded when cert-manager rotates the files.

The check runs in the TLS ClientHello callback (every new connection), costs one ``stat`` pair at
most once per ``min_interval_s``, and loads the new chain into the live context after validating
it on a scratch context, so a half-written rotation never leaves the server without a usable key.
The connection whose handshake noticed the change is switched to a context holding the new chain.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from shared.errors import BadInput

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int], tuple[int, int, int]]


class TLSConfigError(BadInput):
    """The configured certificate or key cannot be used (at start-up: the service does not start)."""


class CertReloader:
    """Owns the server SSLContext and keeps its chain equal to the files on disk."""

    def __init__(
        self,
        cert: str | Path,
        key: str | Path,
        *,
        min_interval_s: float = 1.0,
        on_reload: Callable[[bool], None] = lambda ok: None,
        client_ca: str | Path | None = None,
    ) -> None:
        self.cert, self.key = Path(cert), Path(key)
        self._min_interval_s = min_interval_s
        self._on_reload = on_reload
        self._client_ca = Path(client_ca) if client_ca else None
        """When set, only clients presenting a certificate this CA signed are served (the API
        server, given a client certificate for this webhook in its AdmissionConfiguration)."""
        try:
            self.context = _server_context(self._client_ca)
        except (OSError, ssl.SSLError) as e:
            raise TLSConfigError(f"cannot load the client CA {self._client_ca}: {e}") from e
        try:
            self._stamp = self._stat()
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as e:
            raise TLSConfigError(f"cannot load serving certificate {self.cert} / key {self.key}: {e}") from e
        self._checked = time.monotonic()
        self.context.sni_callback = self._on_client_hello

    def maybe_reload(self) -> ssl.SSLContext | None:
        """Reload when the files changed since the last load; returns a context holding only the new chain."""
        now = time.monotonic()
        if now - self._checked < self._min_interval_s:
            return None
        self._checked = now
        try:
            stamp = self._stat()
        except OSError:
            return None  # mid-rotation: a file is briefly missing; look again later
        if stamp == self._stamp:
            return None
        try:
            fresh = _server_context(self._client_ca)
            fresh.load_cert_chain(self.cert, self.key)
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as e:
            log.warning("serving certificate changed but cannot be loaded yet (%s); keeping the old one", e)
            self._on_reload(False)
            return None
        self._stamp = stamp
        log.info("serving certificate reloaded from %s", self.cert)
        self._on_reload(True)
        return fresh

    def _on_client_hello(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        try:
            fresh = self.maybe_reload()
            if fresh is not None:
                # This handshake copied the old chain already; the live context serves the new one to
                # later connections, and this connection switches to a context holding it.
                conn.context = fresh
        except Exception:  # a failing callback would abort the handshake; serve the old chain instead
            log.exception("certificate reload check failed")

    def _stat(self) -> Stamp:
        a, b = os.stat(self.cert), os.stat(self.key)
        return (a.st_mtime_ns, a.st_size, a.st_ino), (b.st_mtime_ns, b.st_size, b.st_ino)


def _server_context(client_ca: Path | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if client_ca is not None:
        ctx.load_verify_locations(client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
