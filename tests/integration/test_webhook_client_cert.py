"""With ``client_ca`` set the webhook serves only callers presenting a certificate that CA signed
(the API server, given a client certificate for the webhook in its AdmissionConfiguration), so an
AdmissionReview, and the ``pod.admitted`` it becomes, cannot come from anyone else.

Case matrix: the API server's certificate: served; no certificate, or one from another CA:
refused in the handshake, nothing served; an unreadable CA file stops the start with a clear error.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest
import trustme
from natsproc import free_port

from services.webhook.app import Webhook
from services.webhook.settings import WebhookSettings
from services.webhook.tls import TLSConfigError
from shared.bus import BusSettings


def _get(port: int, ctx: ssl.SSLContext) -> bytes:
    """The first bytes of the answer to GET /healthz (b"" or an SSLError when refused)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        return tls.recv(64)


def _refused(port: int, ctx: ssl.SSLContext) -> bool:
    try:
        return not _get(port, ctx).startswith(b"HTTP/1.1 200")
    except (ssl.SSLError, ConnectionError):
        return True


def _client(server_ca: trustme.CA, identity: trustme.CA | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    server_ca.configure_trust(ctx)
    if identity is not None:
        identity.issue_cert("kube-apiserver").configure_cert(ctx)
    return ctx


def _webhook(tmp_path: Path, client_ca: str) -> tuple[Webhook, trustme.CA]:
    server_ca = trustme.CA()
    issued = server_ca.issue_cert("localhost", "127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    (tmp_path / "server-ca.pem").write_bytes(server_ca.cert_pem.bytes())
    settings = WebhookSettings(bind="127.0.0.1", port=0, cert=str(cert), key=str(key), client_ca=client_ca)
    return Webhook(settings, BusSettings(url=f"nats://127.0.0.1:{free_port()}")), server_ca


async def test_only_the_api_servers_certificate_is_served(tmp_path: Path) -> None:
    apiserver_ca, stranger_ca = trustme.CA(), trustme.CA()
    apiserver_ca.cert_pem.write_to_path(str(tmp_path / "client-ca.pem"))
    webhook, server_ca = _webhook(tmp_path, str(tmp_path / "client-ca.pem"))
    async with webhook:
        served = await asyncio.to_thread(_get, webhook.port, _client(server_ca, apiserver_ca))
        assert served.startswith(b"HTTP/1.1 200"), served
        for identity in (None, stranger_ca):
            assert await asyncio.to_thread(_refused, webhook.port, _client(server_ca, identity)), identity


async def test_an_unreadable_client_ca_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match="cannot load the client CA"):
        _webhook(tmp_path, str(tmp_path / "missing.pem"))
