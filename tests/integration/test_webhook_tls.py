"""Serving certificate rotation (cert-manager rewrites the files; no restart).

Cases: a rotated certificate is served to the next new connection; a half-done rotation (new
certificate, old key) keeps the old chain in service and is counted; a bad certificate at
start-up stops the service with a clear error.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import trustme
from natsproc import free_port

from services.webhook.app import Webhook
from services.webhook.settings import WebhookSettings
from services.webhook.tls import TLSConfigError
from shared.bus import BusSettings


def write_cert(ca: trustme.CA, cert: Path, key: Path, *, common_name: str) -> bytes:
    issued = ca.issue_cert("localhost", "127.0.0.1", common_name=common_name)
    # Atomic replace, as kubelet's projected volumes and cert-manager do.
    for blob, path in ((issued.cert_chain_pems[0], cert), (issued.private_key_pem, key)):
        tmp = path.with_suffix(".tmp")
        blob.write_to_path(str(tmp))
        tmp.replace(path)
    return ssl.PEM_cert_to_DER_cert(issued.cert_chain_pems[0].bytes().decode())


async def served_cert(ca: trustme.CA, port: int) -> bytes:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert isinstance(der, bytes)
        return der
    finally:
        writer.close()
        await writer.wait_closed()


def webhook_on(cert: Path, key: Path) -> Webhook:
    settings = WebhookSettings(
        bind="127.0.0.1", port=0, cert=str(cert), key=str(key), cert_check_interval_s=0.0
    )
    return Webhook(settings, BusSettings(url=f"nats://127.0.0.1:{free_port()}"))


async def test_a_rotated_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = write_cert(ca, cert, key, common_name="first")
    async with webhook_on(cert, key) as webhook:
        assert await served_cert(ca, webhook.port) == first
        second = write_cert(ca, cert, key, common_name="second")
        assert await served_cert(ca, webhook.port) == second
        assert await served_cert(ca, webhook.port) == second
        assert webhook.metrics.cert_reloads.labels("ok")._value.get() == 1


async def test_a_half_done_rotation_keeps_the_old_chain(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = write_cert(ca, cert, key, common_name="first")
    async with webhook_on(cert, key) as webhook:
        ca.issue_cert("localhost", common_name="other").cert_chain_pems[0].write_to_path(str(cert))
        assert await served_cert(ca, webhook.port) == first
        assert webhook.metrics.cert_reloads.labels("failed")._value.get() >= 1
        second = write_cert(ca, cert, key, common_name="second")
        assert await served_cert(ca, webhook.port) == second


async def test_an_unusable_certificate_stops_the_start(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    with pytest.raises(TLSConfigError, match="cannot load serving certificate"):
        webhook_on(cert, key)
