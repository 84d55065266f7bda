"""A throw-away CA and the webhook's serving certificate for ``gpubus up`` (``cryptography``).

The API server stand-in trusts the CA (as a real one trusts a webhook's ``caBundle``); the
webhook serves the leaf for ``localhost``/``127.0.0.1``. Files are written once into the data dir
and reused while still valid, so a restarted stack keeps the same trust.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = dt.timedelta(days=365)


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookTLS:
    """Paths of the CA certificate and the webhook's certificate and key."""

    ca_cert: Path
    cert: Path
    key: Path

    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpubus up"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def still_valid(path: Path) -> bool:
    """A PEM certificate at ``path`` that is valid for at least one more day."""
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return False
    return cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=1)


def ensure_webhook_tls(directory: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> WebhookTLS:
    """Create (or reuse) ``ca.crt``, ``webhook.crt``, ``webhook.key`` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    tls = WebhookTLS(ca_cert=directory / "ca.crt", cert=directory / "webhook.crt",
                     key=directory / "webhook.key")
    if tls.key.exists() and still_valid(tls.cert) and still_valid(tls.ca_cert):
        return tls
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("gpubus-up-ca")).issuer_name(_name("gpubus-up-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(now + _VALID)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, encipher_only=False,
                                       decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    leaf = (x509.CertificateBuilder().subject_name(_name("gpubus-webhook")).issuer_name(ca.subject)
            .public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + _VALID)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    tls.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(key_pem(leaf_key))
    tls.key.chmod(0o600)
    return tls
