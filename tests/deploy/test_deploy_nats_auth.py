"""Per-service NATS users: each role can do its job through the real Bus and nothing more.

Case matrix: two configurations, the example ``deploy/nats/nats-server.conf`` and the users the
Helm chart merges into the official NATS chart's config (``nats.config.merge`` in values.yaml,
rendered the way that chart renders it: YAML -> JSON, ``"<< $X >>"`` -> ``$X``), each run by a
real nats-server. For each role: the JetStream work it needs (schema, KV, leases, consumers)
succeeds, the subjects it owns are stored, and a subject of another stage is refused. Node-agents
and monitors have no user: both configurations send them to the auth callout, here a real
``gpubus authn`` (issuer key in ``$GPUBUS_NATS_CALLOUT_ISSUER``, TokenReview by the API server
stand-in), which lets node-1's token in as node-1 only; a node without a token is refused.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio
from asyncwait import wait_until
from helmchart import ROOT, chart_values
from natsproc import free_port, nats_server_binary, wait_until_serving

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.authn import nkeyjwt
from services.authn.app import Authn, AuthnApp
from services.authn.settings import AuthnSettings
from services.dashboard.app import Dashboard
from services.dashboard.settings import DashboardSettings
from shared.bus import ALLOCATIONS, INVENTORY, Bus, BusSettings
from shared.errors import BusRefused
from shared.events import Inventory
from shared.inventory_entries import encode_inventory
from shared.model import DeviceInfo, DeviceUUID

EXAMPLE_CONF = ROOT / "deploy" / "nats" / "nats-server.conf"
ROLES = ("scheduler", "webhook", "tap", "dashboard", "authn")
ISSUER = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_ACCOUNT)
PASSWORD_ENV = {role: f"GPUBUS_NATS_{role.upper().replace('-', '_')}_PASSWORD" for role in ROLES}


def _password(role: str) -> str:
    return f"pw-{role}-0123456789"


def _example_conf(port: int, store: Path) -> str:
    """The example file with this test's port and store; every replaced line must exist."""
    text = EXAMPLE_CONF.read_text()
    for pattern, replacement in ((r"listen: .*", f"listen: 127.0.0.1:{port}"),
                                 (r"http: .*", ""),
                                 (r"store_dir: .*", f"store_dir: {json.dumps(str(store))}")):
        text, count = re.subn(pattern, replacement, text, count=1)
        assert count == 1, f"{EXAMPLE_CONF.name} has no line matching {pattern!r}"
    return text


def _chart_conf(port: int, store: Path) -> str:
    """What the official chart makes of our ``nats.config.merge``, plus listen and JetStream."""
    merge = chart_values()["nats"]["config"]["merge"]
    body = re.sub(r'"<< (\$[A-Za-z_][A-Za-z0-9_]*) >>"', r"\1", json.dumps(merge, indent=1))
    return (f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {json.dumps(str(store))} }}\n"
            f"{body.strip()[1:-1]}\n")


class ConfiguredServer:
    def __init__(self, conf: str, port: int, workdir: Path) -> None:
        self.port = port
        self.conf_path = workdir / "nats.conf"
        self.conf_path.write_text(conf)
        self._workdir = workdir
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def check(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([nats_server_binary(), "-t", "-c", str(self.conf_path)], env=_server_env(),
                              capture_output=True, text=True, timeout=30, check=False)

    def start(self) -> None:
        with (self._workdir / "nats.log").open("ab") as log:
            self._proc = subprocess.Popen([nats_server_binary(), "-c", str(self.conf_path)],
                                          env=_server_env(), stdout=log, stderr=subprocess.STDOUT)
        wait_until_serving(self.port, 10.0, self._proc)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(10)


def _server_env() -> dict[str, str]:
    env = {name: _password(role) for role, name in PASSWORD_ENV.items()}
    env["GPUBUS_NATS_SYS_PASSWORD"] = _password("sys")
    env["GPUBUS_NATS_CALLOUT_ISSUER"] = ISSUER.public_key
    return env


@pytest.fixture(scope="module", params=["example-conf", "helm-values"])
def server(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConfiguredServer]:
    workdir = tmp_path_factory.mktemp(request.param)
    port = free_port()
    render = _example_conf if request.param == "example-conf" else _chart_conf
    srv = ConfiguredServer(render(port, workdir / "js"), port, workdir)
    checked = srv.check()
    assert checked.returncode == 0, checked.stdout + checked.stderr
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _settings(server: ConfiguredServer, role: str, **extra: Any) -> BusSettings:
    return BusSettings(url=server.url, user=role, password=_password(role), name=f"test-{role}",
                       initial_connect_timeout_s=5.0, request_timeout_s=2.0, reconnect_wait_s=0.1,
                       flush_timeout_s=1.0, **extra)


@pytest_asyncio.fixture(loop_scope="session")
async def connect(server: ConfiguredServer) -> AsyncIterator[Any]:
    buses: list[Bus] = []

    async def _connect(role: str) -> Bus:
        bus = await Bus.connect(_settings(server, role), source=f"test-{role}")
        buses.append(bus)
        return bus

    yield _connect
    for bus in buses:
        await bus.close()


class NodeIdentity:
    """The callout side: the API server stand-in (TokenRequest, TokenReview) and ``gpubus authn``."""

    def __init__(self, server: ConfiguredServer, kube: SimKubeClient) -> None:
        self.server, self.kube = server, kube
        self.buses: list[Bus] = []

    async def token(self, node: str) -> str:
        name = f"gpubus-{node}"
        pod = await self.kube.get_pod("gpubus-system", name) or await self.kube.create_pod("gpubus-system", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "agent", "image": "gpubus"}]}})
        return await self.kube.request_token("gpubus-system", "gpubus-node", audiences=["gpubus-nats"],
                                             expiration_s=3600, pod=(name, pod["metadata"]["uid"]))

    async def bus(self, node: str) -> Bus:
        path = self.server.conf_path.parent / f"{node}.token"
        path.write_text(await self.token(node))
        bus = await Bus.connect(BusSettings(url=self.server.url, token_file=str(path), node=node,
                                            name=f"test-{node}", initial_connect_timeout_s=5.0,
                                            request_timeout_s=2.0, reconnect_wait_s=0.1, flush_timeout_s=1.0),
                                source=f"test-{node}")
        self.buses.append(bus)
        return bus


@pytest_asyncio.fixture(loop_scope="session")
async def node_identity(server: ConfiguredServer, tmp_path: Path) -> AsyncIterator[NodeIdentity]:
    seed = tmp_path / "issuer.seed"
    seed.write_bytes(ISSUER.seed)
    async with SimApiServer(namespaces=("default", "gpubus-system")) as api:
        kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        callout_bus = await Bus.connect(_settings(server, "authn"), source="authn")
        settings = AuthnSettings(issuer_seed_file=str(seed), port=0, bind="127.0.0.1")
        identity = NodeIdentity(server, kube)
        try:
            async with AuthnApp(Authn(settings, ISSUER, kube), callout_bus):
                try:
                    yield identity
                finally:
                    for bus in identity.buses:
                        await bus.close()
        finally:
            await callout_bus.close()
            await kube.close()


async def _refused(server: ConfiguredServer, subject: str, *, role: str | None = None,
                   token: str | None = None, within_s: float = 5.0) -> bool:
    """Publish once as ``role`` (or with node-1's ``token``); True when the server answers with a
    permissions violation.

    The violation arrives asynchronously (nats-py may write its flush PING ahead of the PUB),
    so this waits for it; only a publish that was wrongly allowed costs the full ``within_s``.
    """
    violation = asyncio.Event()

    async def on_error(e: Exception) -> None:
        if "permissions violation" in str(e).lower() and subject.lower() in str(e).lower():
            violation.set()

    credentials: dict[str, Any] = ({"token": token, "inbox_prefix": "_INBOX_node-1"} if role is None
                                   else {"user": role, "password": _password(role)})
    nc = await nats.connect(server.url, error_cb=on_error, allow_reconnect=False, **credentials)
    try:
        await nc.publish(subject, b"x")
        await nc.flush(timeout=2)
        await asyncio.wait_for(violation.wait(), within_s)
    except TimeoutError:
        return False
    finally:
        await nc.close()
    return True


async def _stored(bus: Bus, subject: str) -> bool:
    ack = await bus.js.publish(subject, b"x", timeout=2)
    return ack.stream == "GPUBUS"


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_password_variable(role: str) -> None:
    assert f"${PASSWORD_ENV[role]}" in EXAMPLE_CONF.read_text()


async def test_scheduler_owns_the_ledger_and_decisions(connect: Any, server: ConfiguredServer) -> None:
    bus = await connect("scheduler")
    await bus.ensure_schema()
    allocations = await bus.kv(ALLOCATIONS)
    revision = await allocations.put("pod-uid-1", b"decided")
    entry = await allocations.get("pod-uid-1")
    assert entry is not None and entry.revision == revision
    term = await allocations.create("term.scheduler", b"replica-a")  # the fencing token
    assert await allocations.put("pod-uid-1", b"decided", fence=("term.scheduler", term)) > term
    lease = await bus.lease("leader.scheduler", "replica-a", auto_renew=False)
    assert await lease.acquire()
    assert await lease.release()
    assert await _stored(bus, "gpubus.allocation.decided.node-1")
    assert await _stored(bus, "gpubus.pod.unschedulable._")
    assert await _stored(bus, "gpubus.pod.preempted.node-1")

    async def leader(payload: bytes) -> bytes:
        return b'{"Error":""}'

    service = await bus.serve("gpubus.query.scheduler.bind", leader, queue="binders")
    try:  # a standby forwards /bind to the leader over request/reply
        assert await bus.request("gpubus.query.scheduler.bind", b"{}", timeout=5) == b'{"Error":""}'
    finally:
        await service.stop()
    assert await _refused(server, "gpubus.inventory.snapshot.node-1", role="scheduler")
    assert await _refused(server, "gpubus.usage.sample.node-1", role="scheduler")


async def test_node_agent_reports_its_node_and_allocations_but_never_decides(
        node_identity: Any, server: ConfiguredServer, connect: Any) -> None:
    # the schema is the scheduler's to make (on its own, this test found no stream to subscribe to
    # unless an earlier test of the module had made it)
    await (await connect("scheduler")).ensure_schema()
    bus = await node_identity.bus("node-1")
    await bus.ensure_schema()  # a node-scoped bus leaves the schema to the roles
    await bus.route(("gpubus.allocation.decided.*", "gpubus.allocation.released.*"), "node-1", _ignore)
    assert await _stored(bus, "gpubus.inventory.snapshot.node-1")
    assert await _stored(bus, "gpubus.device.health.node-1")
    # released: what a node's DRA plugin reports on unprepare (its own node only; the scheduler's
    # ledger never reads it, so a node can no more free a slice with it than with applied/failed)
    for verb in ("applied", "failed", "mismatch", "released"):
        assert await _stored(bus, f"gpubus.allocation.{verb}.node-1")
    inventory = await bus.kv(INVENTORY)
    await inventory.put("node-1", b"inventory")
    assert (await (await bus.kv(ALLOCATIONS)).items()) is not None
    token = await node_identity.token("node-1")
    # nothing in locks, its own node's old Allocate leases included (gone with the fencing token)
    for subject in ("gpubus.allocation.decided.node-1", "gpubus.allocation.released.node-2",
                    "gpubus.pod.admitted._", "gpubus.inventory.snapshot.node-2", "$KV.allocations.pod-uid-1",
                    "$KV.allocations.term.scheduler", "$KV.inventory.node-2", "$KV.locks.alloc.node-2.1",
                    "$KV.locks.alloc.node-1.1", "$KV.locks.leader.scheduler"):
        assert await _refused(server, subject, token=token), subject


async def test_a_node_without_a_token_is_refused(node_identity: Any, server: ConfiguredServer) -> None:
    with pytest.raises(BusRefused):
        await Bus.connect(BusSettings(url=server.url, name="no-token", initial_connect_timeout_s=5.0),
                          source="intruder")
    with pytest.raises(BusRefused):  # a static user's name without its password is no way around it
        await Bus.connect(BusSettings(url=server.url, user="node-agent", password="guess",
                                      initial_connect_timeout_s=5.0), source="intruder")


async def test_webhook_only_announces_admissions(connect: Any, server: ConfiguredServer) -> None:
    bus = await connect("webhook")
    await bus.ensure_schema()
    assert await _stored(bus, "gpubus.pod.admitted._")
    assert await _stored(bus, "gpubus.pod.rejected._")
    for subject in ("gpubus.allocation.decided.node-1", "gpubus.inventory.snapshot.node-1", "$KV.locks.x"):
        assert await _refused(server, subject, role="webhook"), subject


async def test_monitor_publishes_usage_and_follows_allocations(
        node_identity: Any, server: ConfiguredServer) -> None:
    bus = await node_identity.bus("node-1")
    await bus.route(("gpubus.allocation.*.node-1", "gpubus.allocation.released._",
                     "gpubus.inventory.snapshot.node-1"), "*", _ignore, deliver="all")
    assert await _stored(bus, "gpubus.usage.sample.node-1")
    assert await (await bus.kv(ALLOCATIONS)).items() is not None
    token = await node_identity.token("node-1")
    for subject in ("gpubus.usage.sample.node-2", "gpubus.allocation.decided.node-1",
                    "$KV.allocations.pod-uid-1"):
        assert await _refused(server, subject, token=token), subject


async def test_tap_reads_everything_and_writes_nothing(connect: Any, server: ConfiguredServer) -> None:
    writer = await connect("scheduler")
    await writer.ensure_schema()
    assert await _stored(writer, "gpubus.allocation.released.node-tap")
    tap = await connect("tap")
    messages: list[str] = []
    done = asyncio.Event()

    async def on_raw(subject: str, data: bytes, error: Exception) -> None:
        messages.append(subject)
        done.set()

    await tap.subscribe("gpubus.allocation.released.node-tap", _ignore, deliver="all", on_decode_error=on_raw)
    await asyncio.wait_for(done.wait(), 5)
    assert messages == ["gpubus.allocation.released.node-tap"]
    for subject in ("gpubus.pod.admitted._", "gpubus.allocation.decided.n", "$KV.locks.x",
                    "$JS.API.STREAM.DELETE.GPUBUS"):
        assert await _refused(server, subject, role="tap"), subject


async def test_dashboard_serves_its_view_and_can_write_nothing(connect: Any, node_identity: Any,
                                                               server: ConfiguredServer) -> None:
    await (await connect("scheduler")).ensure_schema()
    writer = await node_identity.bus("node-dash")
    snapshot = Inventory(node="node-dash", devices=(DeviceInfo(id=DeviceUUID("GPU-dash"), type="NVIDIA-A100",
                                                               devmem=81920),))
    await (await writer.kv(INVENTORY)).put("node-dash", encode_inventory(snapshot))
    await writer.publish(snapshot)
    reader = await connect("dashboard")
    # the seed (KV), the live follower (stream) and stream info all pass the user's permissions
    async with Dashboard(DashboardSettings(bind="127.0.0.1", port=0), reader) as dashboard:
        await wait_until(dashboard.ready, 10, what="the dashboard caught up")
        assert "node-dash" in dashboard.timeline.view.nodes
        assert (await dashboard.bounds())[0] > 0
    for subject in ("gpubus.pod.admitted._", "gpubus.allocation.decided.n", "$KV.inventory.node-dash",
                    "$KV.allocations.x", "gpubus.query.scheduler.bind", "$JS.API.STREAM.DELETE.GPUBUS",
                    "$JS.API.CONSUMER.DURABLE.CREATE.GPUBUS.x", "$JS.ACK.GPUBUS.x"):
        assert await _refused(server, subject, role="dashboard"), subject


async def _ignore(event: Any) -> None:
    return None

