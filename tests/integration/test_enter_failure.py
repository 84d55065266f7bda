"""A service whose start fails half-way leaves nothing open: no socket, no task.

One case per service, each failing at a step after others have opened (Kubernetes clients,
NATS connections, subscriptions, HTTP runners): a port already taken, or NATS refusing.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from bus_settings import bus_settings
from leaks import nothing_left_open
from natsproc import free_port
from scheduler_harness import scheduler_app

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.authn import nkeyjwt
from services.authn.app import CALLOUT_SUBJECT, Authn, AuthnApp, load_issuer
from services.authn.settings import AuthnSettings
from services.dashboard.app import Dashboard
from services.dashboard.settings import DashboardSettings
from services.monitor import app as monitor_app
from services.monitor.settings import MonitorSettings
from services.node_agent import app as node_agent_app
from services.node_agent.errors import PluginSocketError
from services.node_agent.settings import NodeAgentSettings
from services.webhook.app import Webhook
from services.webhook.settings import WebhookSettings
from shared.bus import Bus, BusSettings
from shared.bus.errors import NoResponders
from shared.errors import BusUnavailable
from shared.lifetime import run_until_stopped


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


async def test_monitor_on_a_taken_port_leaves_nothing_open(taken_port: int, nats_url: str) -> None:
    """The process's whole start: its NATS connection and route are up when /metrics fails."""
    settings = MonitorSettings(nodes=("node-1",), sources=("sim",), metrics_bind="127.0.0.1",
                               metrics_port=taken_port)
    async with nothing_left_open():
        with pytest.raises(OSError):
            await run_until_stopped(
                lambda lifetime: monitor_app.run(settings, bus_settings(nats_url), lifetime), signals=False)


async def test_node_agent_whose_plugin_socket_cannot_be_bound_leaves_nothing_open(
        tmp_path: Path, nats_url: str) -> None:
    """The process's whole start: NATS, /metrics, the decision route, the health service and the
    simulated GPUs are open when the kubelet side fails."""
    settings = NodeAgentSettings(node_name="node-1", simulate="2xA100-80GB", metrics_port=free_port(),
                                 metrics_host="127.0.0.1", plugin_dir=str(tmp_path / ("d" * 120)),
                                 hook_path=str(tmp_path / "hook"),
                                 pod_resources_socket=str(tmp_path / "pr.sock"))
    async def start() -> None:
        await run_until_stopped(
            lambda lifetime: node_agent_app.run(settings, bus_settings(nats_url), lifetime), signals=False)

    async with nothing_left_open():
        with pytest.raises(PluginSocketError):
            await start()


async def test_dra_node_agent_whose_registration_socket_cannot_be_bound_leaves_nothing_open(
        tmp_path: Path, nats_url: str) -> None:
    """DRA mode: the DRA service is already serving when its registration socket (a directory the
    operator gives) turns out too long; the error says which socket, and both servers are gone."""
    async with SimApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        registry = tmp_path / ("r" * 120)
        settings = NodeAgentSettings(node_name="node-1", simulate="2xA100-80GB", metrics_port=0,
                                     mode="dra", kubeconfig=str(kubeconfig), hook_path=str(tmp_path / "hook"),
                                     dra_plugin_dir=str(tmp_path / "dra"), dra_registry_dir=str(registry),
                                     cdi_dir=str(tmp_path / "cdi"), plugin_dir=str(tmp_path / "dp"))
        async with nothing_left_open():
            with pytest.raises(PluginSocketError, match=f"cannot serve the DRA plugin on {registry}/"):
                await run_until_stopped(
                    lambda lifetime: node_agent_app.run(settings, bus_settings(nats_url), lifetime),
                    signals=False)
        assert not (tmp_path / "dra" / "dra.sock").exists()  # the one that had started is removed


async def test_scheduler_on_a_taken_port_leaves_nothing_open(
        tmp_path: Path, taken_port: int, nats_url: str) -> None:
    """The extender listens last: NATS, Kubernetes, the state's watches, the leases and the owned
    tasks (leader election among them) are all up when the port is found taken."""
    async with SimApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        async with nothing_left_open():
            with pytest.raises(OSError):
                async with scheduler_app(bus_settings(nats_url), kubeconfig, port=taken_port):
                    pass


async def test_scheduler_that_nats_refuses_leaves_nothing_open() -> None:
    refusing = BusSettings(url=f"nats://127.0.0.1:{free_port()}", initial_connect_timeout_s=0.5)
    async with nothing_left_open():
        with pytest.raises(BusUnavailable):
            async with scheduler_app(refusing, None):
                pass
