"""The certificates and keys of a one-machine Kubernetes control plane (``cryptography``).

One CA signs everything, as kubeadm's does: the API server's serving certificate (loopback and
the ``kubernetes`` Service's names), a client certificate per component whose subject is its
Kubernetes identity (``system:kube-scheduler``; ``system:node:<name>`` in ``system:nodes`` for a
kubelet, which the Node authorizer and NodeRestriction then confine to its own node), each
kubelet's serving certificate, and the service-account signing key. Files are made once per data
dir and reused while valid, so a restarted control plane keeps its identities.
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

from gpubus_local.stack_tls import key_pem, still_valid

_VALID = dt.timedelta(days=365)
SERVICE_IP = "10.96.0.1"
"""The ``kubernetes`` Service's address: the first of ``--service-cluster-ip-range`` 10.96.0.0/16."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pair:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """A Kubernetes user as a client certificate: the common name is the user, O the groups."""

    user: str
    groups: tuple[str, ...] = ()


ADMIN = Identity(user="kubernetes-admin", groups=("system:masters",))
CONTROLLER_MANAGER = Identity(user="system:kube-controller-manager")
KUBE_SCHEDULER = Identity(user="system:kube-scheduler")
APISERVER_KUBELET_CLIENT = Identity(user="kube-apiserver-kubelet-client", groups=("kubeadm:cluster-admins",))


def kubelet_identity(node: str) -> Identity:
    return Identity(user=f"system:node:{node}", groups=("system:nodes",))


def _name(cn: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])




def _sans(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names




def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.touch(mode=mode, exist_ok=True)
    path.chmod(mode)
    path.write_bytes(data)


class ClusterPKI:
    """The CA in ``directory`` and the pairs it signs, each made on first use."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = Pair(cert=directory / "ca.crt", key=directory / "ca.key")
        if not (self.ca.key.exists() and still_valid(self.ca.cert)):
            self._make_ca()
        self._ca_key = serialization.load_pem_private_key(self.ca.key.read_bytes(), password=None)
        self._ca_cert = x509.load_pem_x509_certificate(self.ca.cert.read_bytes())

    def _make_ca(self) -> None:
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name("gpubus-local-kubernetes-ca")
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(now + _VALID)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        _write(self.ca.key, key_pem(key), 0o600)
        _write(self.ca.cert, cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, stem: str, subject: x509.Name, *, server_hosts: tuple[str, ...] = (),
               client: bool = False) -> Pair:
        pair = Pair(cert=self.directory / f"{stem}.crt", key=self.directory / f"{stem}.key")
        if pair.key.exists() and still_valid(pair.cert):
            return pair
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        key = ec.generate_private_key(ec.SECP256R1())
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server_hosts else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self._ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now).not_valid_after(now + _VALID)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if server_hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_sans(server_hosts)), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())  # type: ignore[arg-type]
        _write(pair.key, key_pem(key), 0o600)
        _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM))
        return pair

    def client(self, identity: Identity) -> Pair:
        """A client certificate that authenticates as ``identity``."""
        stem = "client-" + identity.user.replace(":", "-")
        return self._issue(stem, _name(identity.user, identity.groups), client=True)

    def server(self, stem: str, cn: str, hosts: tuple[str, ...]) -> Pair:
        """A serving certificate for ``hosts`` (names and addresses)."""
        return self._issue(stem, _name(cn), server_hosts=hosts)

    def apiserver(self) -> Pair:
        return self.server("apiserver", "kube-apiserver", (
            "127.0.0.1", "localhost", SERVICE_IP, "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"))

    def service_account_key(self) -> Pair:
        """The key that signs service-account tokens (``cert`` holds its public half)."""
        pair = Pair(cert=self.directory / "sa.pub", key=self.directory / "sa.key")
        if pair.key.exists() and pair.cert.exists():
            return pair
        key = ec.generate_private_key(ec.SECP256R1())
        _write(pair.key, key_pem(key), 0o600)
        _write(pair.cert, key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
        return pair
