"""Per-service NATS users: each role can do its job through the real Bus and nothing more.

Case matrix: two configurations, the example ``deploy/nats/nats-server.conf`` and the users the
Helm chart merges into the official NATS chart's config (``nats.config.merge`` in values.yaml,
rendered the way that chart renders it: YAML -> JSON, ``"<< $X >>"`` -> ``$X``), each run by a
real nats-server. For each role: the JetStream work it needs (schema, KV, leases, consumers)
succeeds, the subjects it owns are stored, and a subject of another stage is refused.
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

from services.dashboard.app import Dashboard
from services.dashboard.settings import DashboardSettings
from shared.bus import ALLOCATIONS, INVENTORY, LOCKS, Bus, BusSettings
from shared.events import Inventory
from shared.inventory_entries import encode_inventory
from shared.model import DeviceInfo, DeviceUUID

EXAMPLE_CONF = ROOT / "deploy" / "nats" / "nats-server.conf"
ROLES = ("scheduler", "webhook", "node-agent", "monitor", "tap", "dashboard")
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


async def _refused(server: ConfiguredServer, role: str, subject: str, within_s: float = 5.0) -> bool:
    """Publish once as ``role``; True when the server answers with a permissions violation.

    The violation arrives asynchronously (nats-py may write its flush PING ahead of the PUB),
    so this waits for it; only a publish that was wrongly allowed costs the full ``within_s``.
    """
    violation = asyncio.Event()

    async def on_error(e: Exception) -> None:
        if "permissions violation" in str(e).lower() and subject.lower() in str(e).lower():
            violation.set()

    nc = await nats.connect(server.url, user=role, password=_password(role), error_cb=on_error,
                            allow_reconnect=False)
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
    lease = await bus.lease("alloc.node-1.1", "pod-uid-1", auto_renew=False)
    assert await lease.acquire()
    assert await lease.release()
    assert await _stored(bus, "gpubus.allocation.decided.node-1")
    assert await _stored(bus, "gpubus.pod.unschedulable._")

    async def leader(payload: bytes) -> bytes:
        return b'{"Error":""}'

    service = await bus.serve("gpubus.query.scheduler.bind", leader, queue="binders")
    try:  # a standby forwards /bind to the leader over request/reply
        assert await bus.request("gpubus.query.scheduler.bind", b"{}", timeout=5) == b'{"Error":""}'
    finally:
        await service.stop()
    assert await _refused(server, "scheduler", "gpubus.inventory.snapshot.node-1")
    assert await _refused(server, "scheduler", "gpubus.usage.sample.node-1")


async def test_node_agent_reports_its_node_and_allocations_but_never_decides(
        connect: Any, server: ConfiguredServer) -> None:
    bus = await connect("node-agent")
    await bus.ensure_schema()
    await bus.subscribe("gpubus.allocation.>", _ignore, deliver="new")
    assert await _stored(bus, "gpubus.inventory.snapshot.node-1")
    assert await _stored(bus, "gpubus.device.health.node-1")
    for verb in ("applied", "failed", "mismatch"):
        assert await _stored(bus, f"gpubus.allocation.{verb}.node-1")
    inventory = await bus.kv(INVENTORY)
    await inventory.put("node-1", b"inventory")
    locks = await bus.kv(LOCKS)
    revision = await locks.create("alloc.node-1.2", b"pod-uid-2")
    await locks.delete("alloc.node-1.2", last=revision)
    assert (await (await bus.kv(ALLOCATIONS)).items()) is not None
    for subject in ("gpubus.allocation.decided.node-1", "gpubus.allocation.released.node-1",
                    "gpubus.pod.admitted._", "gpubus.usage.sample.node-1", "$KV.allocations.pod-uid-1"):
        assert await _refused(server, "node-agent", subject), subject


async def test_webhook_only_announces_admissions(connect: Any, server: ConfiguredServer) -> None:
    bus = await connect("webhook")
    await bus.ensure_schema()
    assert await _stored(bus, "gpubus.pod.admitted._")
    assert await _stored(bus, "gpubus.pod.rejected._")
    for subject in ("gpubus.allocation.decided.node-1", "gpubus.inventory.snapshot.node-1", "$KV.locks.x"):
        assert await _refused(server, "webhook", subject), subject


async def test_monitor_publishes_usage_and_follows_allocations(
        connect: Any, server: ConfiguredServer) -> None:
    bus = await connect("monitor")
    await bus.ensure_schema()
    await bus.subscribe("gpubus.allocation.>", _ignore, deliver="all")
    assert await _stored(bus, "gpubus.usage.sample.node-1")
    assert await (await bus.kv(ALLOCATIONS)).items() is not None
    for subject in ("gpubus.allocation.applied.node-1", "gpubus.inventory.snapshot.node-1",
                    "$KV.allocations.pod-uid-1"):
        assert await _refused(server, "monitor", subject), subject


async def test_tap_reads_everything_and_writes_nothing(connect: Any, server: ConfiguredServer) -> None:
    writer = await connect("node-agent")
    await writer.ensure_schema()
    assert await _stored(writer, "gpubus.inventory.snapshot.node-tap")
    tap = await connect("tap")
    messages: list[str] = []
    done = asyncio.Event()

    async def on_raw(subject: str, data: bytes, error: Exception) -> None:
        messages.append(subject)
        done.set()

    await tap.subscribe("gpubus.inventory.snapshot.node-tap", _ignore, deliver="all", on_decode_error=on_raw)
    await asyncio.wait_for(done.wait(), 5)
    assert messages == ["gpubus.inventory.snapshot.node-tap"]
    for subject in ("gpubus.pod.admitted._", "gpubus.allocation.decided.n", "$KV.locks.x",
                    "$JS.API.STREAM.DELETE.GPUBUS"):
        assert await _refused(server, "tap", subject), subject


async def test_dashboard_serves_its_view_and_can_write_nothing(connect: Any,
                                                               server: ConfiguredServer) -> None:
    writer = await connect("node-agent")
    await writer.ensure_schema()
    snapshot = Inventory(node="node-dash", devices=(DeviceInfo(id=DeviceUUID("GPU-dash"), type="NVIDIA-A100",
                                                               devmem=81920),))
    await (await writer.kv(INVENTORY)).put("node-dash", encode_inventory(snapshot))
    await writer.publish(snapshot)
    reader = await connect("dashboard")
    dashboard = await Dashboard.start(DashboardSettings(bind="127.0.0.1", port=0), reader)
    try:  # the seed (KV), the live follower (stream) and stream info all pass the user's permissions
        await wait_until(dashboard.ready, 10, what="the dashboard caught up")
        assert "node-dash" in dashboard.timeline.view.nodes
        assert (await dashboard.bounds())[0] > 0
    finally:
        await dashboard.close()
    for subject in ("gpubus.pod.admitted._", "gpubus.allocation.decided.n", "$KV.inventory.node-dash",
                    "$KV.allocations.x", "gpubus.query.scheduler.bind", "$JS.API.STREAM.DELETE.GPUBUS",
                    "$JS.API.CONSUMER.DURABLE.CREATE.GPUBUS.x", "$JS.ACK.GPUBUS.x"):
        assert await _refused(server, "dashboard", subject), subject


async def _ignore(event: Any) -> None:
    return None

