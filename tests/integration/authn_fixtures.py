"""A real nats-server in auth-callout mode, the API server stand-in and a real ``gpubus authn``.

The server runs the configuration ``services.authn.serverconf`` renders (accounts AUTH, GPUBUS,
SYS; static role user ``gpubus``); node pods ``gpubus-<node>`` of the service account
``gpubus-system:gpubus-node`` are created on their nodes, and their tokens come from a real
TokenRequest, written to files as a kubelet projects them.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest_asyncio
from bus_settings import bus_settings
from natsproc import NatsServerProcess

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.authn import nkeyjwt, serverconf
from services.authn.app import Authn, AuthnApp
from services.authn.settings import AuthnSettings
from shared.bus import Bus

NAMESPACE = "gpubus-system"
SERVICE_ACCOUNT = "gpubus-node"
AUDIENCE = "gpubus-nats"


@dataclass
class CalloutRig:
    tmp: Path
    nats: NatsServerProcess
    api: SimApiServer
    kube: SimKubeClient
    issuer: nkeyjwt.Signer
    settings: AuthnSettings
    role_password: str
    callout_password: str
    authn: AuthnApp | None = None
    buses: list[Bus] = field(default_factory=list)
    authn_exits: AsyncExitStack = field(default_factory=AsyncExitStack)
    """Closes the running callout (:meth:`stop_authn`); it may be started again after."""

    @property
    def url(self) -> str:
        return self.nats.url

    def refused(self, reason: str) -> float:
        assert self.authn is not None
        value = self.authn.authn.metrics.registry.get_sample_value("gpubus_authn_refused_total",
                                                                   {"reason": reason})
        return value or 0.0

    def allowed(self) -> float:
        assert self.authn is not None
        return self.authn.authn.metrics.registry.get_sample_value("gpubus_authn_allowed_total") or 0.0

    async def start_authn(self) -> AuthnApp:
        bus = await Bus.connect(bus_settings(self.url, user="authn", password=self.callout_password),
                                source="authn")
        self.buses.append(bus)
        self.authn = await self.authn_exits.enter_async_context(
            AuthnApp(Authn(self.settings, self.issuer, self.kube), bus))
        return self.authn

    async def stop_authn(self) -> None:
        assert self.authn is not None
        await self.authn_exits.aclose()
        await self.authn.bus.close()

    async def role_bus(self) -> Bus:
        settings = bus_settings(self.url, user="gpubus", password=self.role_password)
        bus = await Bus.connect(settings, source="role")
        self.buses.append(bus)
        return bus

    async def node_pod(self, node: str) -> tuple[str, str]:
        """The node's agent pod (created once), as (name, uid)."""
        name = f"gpubus-{node}"
        pod = await self.kube.get_pod(NAMESPACE, name)
        if pod is None:
            pod = await self.kube.create_pod(NAMESPACE, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"nodeName": node, "serviceAccountName": SERVICE_ACCOUNT,
                         "containers": [{"name": "agent", "image": "gpubus"}]}})
        return name, pod["metadata"]["uid"]

    async def token_file(self, node: str, *, audience: str = AUDIENCE, service_account: str = SERVICE_ACCOUNT,
                         bound: bool = True) -> Path:
        pod = await self.node_pod(node) if bound else None
        token = await self.kube.request_token(NAMESPACE, service_account, audiences=[audience],
                                              expiration_s=3600, pod=pod)
        return self.write_token(token)

    def write_token(self, token: str) -> Path:
        path = self.tmp / f"token-{secrets.token_hex(4)}"
        path.write_text(token)
        return path

    async def node_bus(self, node: str, token_file: Path, **overrides: object) -> Bus:
        bus = await Bus.connect(bus_settings(self.url, token_file=str(token_file), node=node, **overrides),
                                source=f"node-agent {node}")
        self.buses.append(bus)
        return bus


@pytest_asyncio.fixture
async def callout(tmp_path: Path) -> AsyncIterator[CalloutRig]:
    issuer = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_ACCOUNT)
    seed = tmp_path / "issuer.seed"
    seed.write_bytes(issuer.seed)
    role_pw, callout_pw = secrets.token_hex(8), secrets.token_hex(8)
    conf = tmp_path / "nats.conf"
    conf.write_text(serverconf.render(serverconf.CalloutConfig(
        issuer=issuer.public_key, callout_user="authn", callout_password=callout_pw,
        roles={"gpubus": role_pw}, auth_timeout_s=1.0)))
    nats = NatsServerProcess(tmp_path / "nats", extra_args=("-c", str(conf)))
    nats.start()
    api = SimApiServer(namespaces=("default", NAMESPACE))
    await api.start()
    kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
    settings = AuthnSettings(issuer_seed_file=str(seed), audience=AUDIENCE, port=0, bind="127.0.0.1",
                             service_accounts=(f"{NAMESPACE}:{SERVICE_ACCOUNT}",))
    rig = CalloutRig(tmp_path, nats, api, kube, issuer, settings, role_pw, callout_pw)
    try:
        await rig.start_authn()
        role = await rig.role_bus()
        await role.ensure_schema()
        yield rig
    finally:
        with contextlib.suppress(Exception):
            await rig.authn_exits.aclose()
        for bus in reversed(rig.buses):
            await bus.close()
        await kube.close()
        await api.stop()
        nats.stop()
