"""The extender over HTTPS with client certificates (kube-scheduler's ``enableHTTPS`` and
``tlsConfig``): with a client CA set, a caller presenting a certificate that CA signed is served,
one with no certificate or another CA's is refused in the handshake; unusable files stop the
start with a clear error. (Without a certificate the extender serves plain HTTP on loopback, for a
kube-scheduler in the same pod: docs/security.md.)
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
from pathlib import Path

import pytest
from bus_settings import bus_settings
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from scheduler_harness import scheduler_app

from services.scheduler.errors import TLSConfigError

pytest_plugins = ("scheduler_fixtures",)

Pair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(cn: str, issuer: Pair | None, *, ca: bool = False, server: bool = False) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(cn))
               .issuer_name(issuer[0].subject if issuer else _name(cn)).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        names = x509.SubjectAlternativeName([x509.DNSName("localhost")])
        builder = builder.add_extension(names, critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def _write(directory: Path, name: str, pair: Pair) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    cert.write_bytes(pair[0].public_bytes(serialization.Encoding.PEM))
    key.write_bytes(pair[1].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return cert, key


def _client(ca: Path, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


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


async def test_only_clients_with_a_certificate_of_the_ca_are_served(nats_url: str, tmp_path: Path) -> None:
    ca = _cert("gpubus-ca", None, ca=True)
    ca_file, _ = _write(tmp_path, "ca", ca)
    server_cert, server_key = _write(tmp_path, "extender", _cert("localhost", ca, server=True))
    kube_scheduler = _write(tmp_path, "kube-scheduler", _cert("kube-scheduler", ca))
    stranger_ca = _cert("other-ca", None, ca=True)
    stranger = _write(tmp_path, "stranger", _cert("kube-scheduler", stranger_ca))
    async with scheduler_app(bus_settings(nats_url), None, bind="127.0.0.1", tls_cert=str(server_cert),
                                tls_key=str(server_key), tls_client_ca=str(ca_file)) as app:
        served = await asyncio.to_thread(_get, app.port, _client(ca_file, kube_scheduler))
        assert served.startswith(b"HTTP/1.1 200"), served
        for who in (None, stranger):
            assert await asyncio.to_thread(_refused, app.port, _client(ca_file, who)), who


async def test_unusable_tls_files_stop_the_start_with_a_clear_error(nats_url: str, tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match="cannot use the extender's TLS files"):
        async with scheduler_app(bus_settings(nats_url), None, tls_cert=str(tmp_path / "missing.crt"),
                                 tls_key=str(tmp_path / "missing.key")):
            pass
