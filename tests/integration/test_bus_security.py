"""Connecting the bus with credentials and TLS, against private nats-servers that demand them.

Cases: user/password right -> connected and publishing; wrong password, no credentials ->
BusRefused at once, the password never in the message; token auth; TLS with the CA that
signed the server certificate -> connected; a foreign CA or no CA -> BusRefused naming TLS;
mutual TLS with and without a client certificate (refused at once); settings naming missing files or a key
without a certificate are refused before any connect, naming the field.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from bus_settings import bus_settings
from natsproc import NatsServerProcess

from shared.bus import Bus
from shared.errors import BusRefused, BusUnavailable
from shared.events import AllocationReleased

PASSWORD = "s3cret-pw"
TOKEN = "t0ken-value"


def nats_with_config(tmp_path: Path, name: str, config: str) -> NatsServerProcess:
    conf = tmp_path / f"{name}.conf"
    conf.write_text(config)
    return NatsServerProcess(tmp_path / name, extra_args=("-c", str(conf)))


@pytest.fixture
def password_nats(tmp_path: Path) -> Iterator[NatsServerProcess]:
    config = f'authorization {{ user: alice, password: "{PASSWORD}" }}\n'
    with nats_with_config(tmp_path, "auth", config) as s:
        yield s


@pytest.fixture
def token_nats(tmp_path: Path) -> Iterator[NatsServerProcess]:
    with nats_with_config(tmp_path, "token", f'authorization {{ token: "{TOKEN}" }}\n') as s:
        yield s


class Pki:
    """A private CA, a server certificate for 127.0.0.1 and a client certificate, as files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        ca = trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("gpubus-client@example.org")
        self.ca = self._write("ca.pem", ca.cert_pem)
        self.server_cert = self._write("server.pem", server.cert_chain_pems[0])
        self.server_key = self._write("server.key", server.private_key_pem)
        self.client_cert = self._write("client.pem", client.cert_chain_pems[0])
        self.client_key = self._write("client.key", client.private_key_pem)
        self.foreign_ca = self._write("foreign-ca.pem", trustme.CA().cert_pem)

    def _write(self, name: str, blob: trustme.Blob) -> str:
        path = self.root / name
        blob.write_to_path(str(path))
        return str(path)

    def server_config(self, *, verify_clients: bool) -> str:
        lines = [f'cert_file: "{self.server_cert}"', f'key_file: "{self.server_key}"']
        if verify_clients:
            lines += ["verify: true", f'ca_file: "{self.ca}"']
        return "tls {\n  " + "\n  ".join(lines) + "\n}\n"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def tls_nats(tmp_path: Path, pki: Pki) -> Iterator[NatsServerProcess]:
    with nats_with_config(tmp_path, "tls", pki.server_config(verify_clients=False)) as s:
        yield s


@pytest.fixture
def mtls_nats(tmp_path: Path, pki: Pki) -> Iterator[NatsServerProcess]:
    with nats_with_config(tmp_path, "mtls", pki.server_config(verify_clients=True)) as s:
        yield s


async def connect_and_publish(url: str, **settings: object) -> None:
    """Connect, publish one event to JetStream (proves a working session), close."""
    bus = await Bus.connect(bus_settings(url, **settings), source="sec-test")
    try:
        await bus.ensure_schema()
        await bus.publish(AllocationReleased(pod_uid=uuid.uuid4().hex, namespace="ns", name="p",
                                             why="deleted", node="n1"))
        assert bus.published == 1
    finally:
        await bus.close()


async def test_right_user_and_password_connect(password_nats: NatsServerProcess) -> None:
    await connect_and_publish(password_nats.url, user="alice", password=PASSWORD)


async def test_password_in_the_url_connects(password_nats: NatsServerProcess) -> None:
    await connect_and_publish(f"nats://alice:{PASSWORD}@127.0.0.1:{password_nats.port}")


@pytest.mark.parametrize("credentials", [{"user": "alice", "password": "wrong-pw"}, {}],
                         ids=["wrong-password", "no-credentials"])
async def test_refused_credentials_fail_at_once_without_leaking_the_password(
        password_nats: NatsServerProcess, credentials: dict[str, str]) -> None:
    # A deadline far beyond the test timeout: only the refusal can end this connect.
    settings = bus_settings(password_nats.url, initial_connect_timeout_s=3600.0, **credentials)
    with pytest.raises(BusRefused, match="credentials refused") as caught:
        await Bus.connect(settings, source="t")
    assert "wrong-pw" not in str(caught.value)


async def test_right_token_connects_and_wrong_token_is_refused(token_nats: NatsServerProcess) -> None:
    await connect_and_publish(token_nats.url, token=TOKEN)
    with pytest.raises(BusRefused, match="credentials refused"):
        await Bus.connect(bus_settings(token_nats.url, token="nope", initial_connect_timeout_s=3600.0),
                          source="t")


async def test_tls_with_the_signing_ca_connects(tls_nats: NatsServerProcess, pki: Pki) -> None:
    await connect_and_publish(tls_nats.url, tls_ca=pki.ca)


async def test_tls_url_scheme_with_the_signing_ca_connects(tls_nats: NatsServerProcess, pki: Pki) -> None:
    await connect_and_publish(f"tls://127.0.0.1:{tls_nats.port}", tls_ca=pki.ca)


@pytest.mark.parametrize("ca", ["foreign", None], ids=["foreign-ca", "system-trust-only"])
async def test_tls_with_an_untrusted_server_certificate_is_refused(
        tls_nats: NatsServerProcess, pki: Pki, ca: str | None) -> None:
    tls_ca = pki.foreign_ca if ca == "foreign" else None
    settings = bus_settings(tls_nats.url, tls_ca=tls_ca, initial_connect_timeout_s=3600.0)
    with pytest.raises(BusRefused, match="TLS certificate verification failed"):
        await Bus.connect(settings, source="t")


async def test_mutual_tls_with_a_client_certificate_connects(mtls_nats: NatsServerProcess, pki: Pki) -> None:
    await connect_and_publish(mtls_nats.url, tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)


async def test_mutual_tls_without_a_client_certificate_is_refused(
        mtls_nats: NatsServerProcess, pki: Pki) -> None:
    settings = bus_settings(mtls_nats.url, tls_ca=pki.ca, initial_connect_timeout_s=3600.0)
    with pytest.raises(BusRefused, match="TLS handshake failed"):
        await Bus.connect(settings, source="t")


async def test_refused_is_still_a_bus_unavailable_for_callers_that_only_handle_outages() -> None:
    assert issubclass(BusRefused, BusUnavailable)


@pytest.mark.parametrize(("field", "value"), [
    ("tls_ca", "missing-ca.pem"),
    ("tls_cert", "missing-cert.pem"),
    ("creds_file", "missing.creds"),
    ("nkey_seed_file", "missing.nk"),
])
async def test_settings_naming_a_missing_file_are_refused_naming_the_field(
        tmp_path: Path, field: str, value: str) -> None:
    settings = bus_settings("nats://127.0.0.1:1", **{field: str(tmp_path / value)})
    with pytest.raises(BusRefused, match=f"bus setting {field}: no such file"):
        await Bus.connect(settings, source="t")


async def test_a_key_without_a_certificate_is_refused(pki: Pki) -> None:
    with pytest.raises(BusRefused, match="tls_key: given without tls_cert"):
        await Bus.connect(bus_settings("nats://127.0.0.1:1", tls_key=pki.client_key), source="t")


async def test_a_ca_file_that_is_not_pem_is_refused_naming_the_field(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(BusRefused, match="tls_ca"):
        await Bus.connect(bus_settings("nats://127.0.0.1:1", tls_ca=str(bogus)), source="t")
