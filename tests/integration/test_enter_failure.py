"""A service whose start fails half-way leaves nothing open: no socket, no task.

One case per service, each failing at a step after others have opened (Kubernetes clients,
NATS connections, subscriptions, HTTP runners): a port already taken, or NATS refusing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from leaks import nothing_left_open
from natsproc import free_port

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.authn import nkeyjwt
from services.authn.app import CALLOUT_SUBJECT, Authn, AuthnApp, load_issuer
from services.authn.settings import AuthnSettings
from services.dashboard.app import Dashboard
from services.dashboard.settings import DashboardSettings
from services.webhook.app import Webhook
from services.webhook.settings import WebhookSettings
from shared.bus import Bus, BusSettings
from shared.bus.errors import NoResponders


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


async def test_webhook_on_a_taken_port_leaves_nothing_open(tmp_path: Path, taken_port: int) -> None:
    async with SimApiServer() as api:
        settings = WebhookSettings(bind="127.0.0.1", port=taken_port,
                                   kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        async with nothing_left_open():
            with pytest.raises(OSError):
                async with Webhook(settings, BusSettings(url=f"nats://127.0.0.1:{free_port()}")):
                    pass


async def test_authn_on_a_taken_port_stops_serving_the_callout(
        tmp_path: Path, taken_port: int, bus: Bus) -> None:
    seed = tmp_path / "issuer.seed"
    seed.write_bytes(nkeyjwt.Signer.generate(nkeyjwt.PREFIX_ACCOUNT).seed)
    settings = AuthnSettings(issuer_seed_file=str(seed), bind="127.0.0.1", port=taken_port)
    async with SimApiServer() as api:
        kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            async with nothing_left_open():
                with pytest.raises(OSError):
                    async with AuthnApp(Authn(settings, load_issuer(str(seed)), kube), bus):
                        pass
        finally:
            await kube.close()
    with pytest.raises(NoResponders):
        await bus.request(CALLOUT_SUBJECT, b"{}", timeout=2.0)


async def test_dashboard_on_a_taken_port_leaves_nothing_open(taken_port: int, bus: Bus) -> None:
    async with nothing_left_open():
        with pytest.raises(OSError):
            async with Dashboard(DashboardSettings(bind="127.0.0.1", port=taken_port), bus):
                pass
