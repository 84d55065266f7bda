"""Per-node identity on NATS: a real nats-server with auth callout, a real ``gpubus authn``, tokens
from the API server stand-in's TokenRequest and checked by its TokenReview.

Cases: node-1's identity (node-agent and monitor) may publish its own inventory, write its own
key, take and delete its own lease, read its own decisions and publish its usage; it is refused
publishing node-2's inventory, writing node-2's inventory key, taking or deleting a node-2 lease,
and reading node-2's decisions (a consumer on their subject, a consumer without a filter in its
create request, a plain subscription). A token for another audience, an expired token, the token
of a deleted pod, a token of another service account and garbage are each refused with a log line
naming the reason and a counted metric.
With the callout down, a new connection waits and retries until it is back, and an existing one
keeps working.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import msgpack
import nats
import nats.errors
import pytest
from asyncwait import wait_until
from authn_fixtures import AUDIENCE, NAMESPACE, CalloutRig, callout
from bus_settings import bus_settings
from monitor_builders import GPU0, allocation
from nats.js import api as js_api

from services.monitor.app import MonitorApp
from services.monitor.settings import MonitorSettings
from shared.bus import ALLOCATIONS, INVENTORY, LOCKS, STREAM, Bus
from shared.codec import to_wire
from shared.errors import BusRefused, BusUnavailable
from shared.events import AllocationDecided, AllocationReleased, Event, Inventory, Usage

__all__ = ["callout"]

#: A refused request is a timeout, which the bus rides out as a failover for ``failover_s``.
FAST = {"request_timeout_s": 0.5, "failover_s": 1.0}


async def _stored(role: Bus, subject: str) -> bool:
    try:
        await role.js.get_last_msg(STREAM, subject)
    except nats.js.errors.NotFoundError:
        return False
    return True


async def test_node_is_let_in_as_its_node_and_does_its_own_work(callout: CalloutRig) -> None:
    node1 = await callout.node_bus("node-1", await callout.token_file("node-1"))
    role = await callout.role_bus()
    await node1.publish(Inventory(node="node-1", devices=()))
    await (await node1.kv(INVENTORY)).put("node-1", b"node-1's devices")
    got: list[Event] = []
    await node1.route(("gpubus.allocation.released.*",), "node-1", lambda e: _append(got, e))
    await role.publish(AllocationReleased(node="node-1", pod_uid="u1", namespace="ns", name="p", why="test"))
    await wait_until(lambda: len(got) == 1, timeout=10)
    assert (await (await role.kv(INVENTORY)).get("node-1")).value == b"node-1's devices"  # type: ignore[union-attr]
    assert callout.allowed() == 1


async def _append(got: list[Event], event: Event) -> None:
    got.append(event)


async def test_node_cannot_publish_or_write_another_nodes_inventory(callout: CalloutRig) -> None:
    node1 = await callout.node_bus("node-1", await callout.token_file("node-1"), **FAST)
    role = await callout.role_bus()
    with pytest.raises(BusUnavailable):
        await node1.publish(Inventory(node="node-2", devices=()))
    with pytest.raises(BusUnavailable):
        await (await node1.kv(INVENTORY)).put("node-2", b"phantom GPUs")
    assert not await _stored(role, "gpubus.inventory.snapshot.node-2")
    assert await (await role.kv(INVENTORY)).get("node-2") is None
    assert node1.is_connected  # refused, not thrown out


async def test_node_cannot_take_or_delete_any_lease_nor_fence_the_ledger(callout: CalloutRig) -> None:
    """Its own node's Allocate leases included: they went with the fencing token (issue 32)."""
    node1 = await callout.node_bus("node-1", await callout.token_file("node-1"), **FAST)
    role = await callout.role_bus()
    for key in ("alloc.node-1.1", "alloc.node-2.1", "leader.scheduler"):
        with pytest.raises(BusUnavailable):
            await (await node1.lease(key, "pod-x", auto_renew=False)).acquire()
        assert await (await role.kv(LOCKS)).get(key) is None
    held = await role.lease("leader.scheduler", "replica-a", auto_renew=False)
    assert await held.acquire()
    with pytest.raises(BusUnavailable):
        await (await node1.kv(LOCKS)).delete("leader.scheduler")
    with pytest.raises(BusUnavailable):
        await (await node1.kv(LOCKS)).get("leader.scheduler")
    with pytest.raises(BusUnavailable):
        await (await node1.kv(ALLOCATIONS)).put("term.scheduler", b"node-1")
    entry = await (await role.kv(LOCKS)).get("leader.scheduler")
    assert entry is not None and entry.value == b"replica-a"


async def test_node_cannot_read_another_nodes_decisions(callout: CalloutRig) -> None:
    node1 = await callout.node_bus("node-1", await callout.token_file("node-1"), **FAST)
    with pytest.raises(BusUnavailable):
        await node1.route(("gpubus.allocation.decided.node-2",), "node-2", lambda e: _append([], e))
    for config in (js_api.ConsumerConfig(filter_subject="gpubus.allocation.decided.node-2"),
                   js_api.ConsumerConfig(filter_subjects=["gpubus.allocation.decided.node-1",
                                                          "gpubus.allocation.decided.node-2"]),
                   js_api.ConsumerConfig(name="sneaky", filter_subject="gpubus.allocation.>")):
        with pytest.raises(nats.errors.TimeoutError):
            await node1.js.add_consumer(STREAM, config, timeout=0.5)
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    plain = await nats.connect(callout.url, token=(await callout.token_file("node-1")).read_text(),
                               inbox_prefix="_INBOX_node-1", allow_reconnect=False,
                               error_cb=on_error)
    try:
        await plain.subscribe("gpubus.allocation.decided.node-2")
        await plain.flush()
        await wait_until(lambda: any("permissions violation for subscription" in str(e).lower()
                                     for e in errors), timeout=5)
    finally:
        await plain.close()


async def _refused_connect(rig: CalloutRig, token: str) -> None:
    """A client with this token (not a token file: one refusal is final) is refused."""
    with pytest.raises(BusRefused, match="credentials refused"):
        await Bus.connect(bus_settings(rig.url, token=token), source="intruder")


@pytest.mark.parametrize(("case", "reason", "logged"), [
    ("another audience", "token_rejected", "is invalid for the target audiences"),
    ("expired", "token_rejected", "has expired"),
    ("deleted pod", "token_rejected", 'pod "gpubus-node-3" not found'),
    ("another service account", "service_account_not_allowed", "may not speak for a node"),
    ("garbage", "token_rejected", "token lookup failed"),
    ("no token", "no_token", "sent no token"),
])
async def test_bad_tokens_are_refused_logged_and_counted(
        callout: CalloutRig, caplog: pytest.LogCaptureFixture, case: str, reason: str, logged: str) -> None:
    if case == "another audience":
        token = (await callout.token_file("node-1", audience="vault")).read_text()
    elif case == "expired":
        pod = await callout.node_pod("node-1")
        token, _ = callout.api.tokens.issue(NAMESPACE, "gpubus-node", audiences=[AUDIENCE], expiration_s=600,
                                            pod=pod, issued_at=time.time() - 3600)
    elif case == "deleted pod":
        token = (await callout.token_file("node-3")).read_text()
        await callout.kube.delete_pod(NAMESPACE, "gpubus-node-3")
    elif case == "another service account":
        token = (await callout.token_file("node-1", service_account="default", bound=False)).read_text()
    elif case == "garbage":
        token = "eyJhbGciOiJub25lIn0.garbage.x"
    else:
        token = ""
    before = callout.refused(reason)
    with caplog.at_level(logging.WARNING, logger="services.authn.app"):
        await _refused_connect(callout, token)
    assert callout.refused(reason) == before + 1
    assert any(f"({reason})" in r.getMessage() and logged in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    assert callout.allowed() == 0


async def test_callout_down_new_connections_wait_existing_keep_working(
        callout: CalloutRig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="shared.bus.client")
    token = await callout.token_file("node-1")
    existing = await callout.node_bus("node-1", token)
    await callout.stop_authn()
    connecting = asyncio.create_task(callout.node_bus("node-2", await callout.token_file("node-2"),
                                                      initial_connect_timeout_s=60.0))
    await existing.publish(Inventory(node="node-1", devices=()))  # the callout is not asked again
    await (await existing.kv(INVENTORY)).put("node-1", b"still here")
    await wait_until(lambda: any("refused our token" in r.getMessage() for r in caplog.records), timeout=15)
    assert not connecting.done()
    await callout.start_authn()
    newcomer = await asyncio.wait_for(connecting, 30)
    await newcomer.publish(Inventory(node="node-2", devices=()))
    assert newcomer.is_connected and existing.is_connected


async def test_monitor_works_as_its_node(callout: CalloutRig) -> None:
    """The monitor of node-1, on node-1's identity: ledger from the bucket and from node-1's
    decisions, usage published for node-1 only."""
    role = await callout.role_bus()
    early = allocation(str(uuid.uuid4()), "early", [[(GPU0, 3000, 30)]], node="node-1")
    await (await role.kv(ALLOCATIONS)).put(early.pod_uid, msgpack.packb(to_wire(early)))
    usage: list[Event] = []
    await role.subscribe("gpubus.usage.>", lambda e: _append(usage, e))
    node1 = await callout.node_bus("node-1", await callout.token_file("node-1"))
    app = MonitorApp.build(MonitorSettings(nodes=("node-1",), sources=("sim",), metrics_bind="127.0.0.1",
                                           metrics_port=0, interval_s=3600.0, publish_interval_s=0.0,
                                           cleanup_interval_s=0.0, resync_interval_s=0.0), node1)
    async with app:
        monitor = app.monitors["node-1"]
        assert early.pod_uid in monitor.ledger
        late = allocation(str(uuid.uuid4()), "late", [[(GPU0, 1000, 10)]], node="node-1")
        await role.publish(AllocationDecided(allocation=late, node="node-1"))
        await wait_until(lambda: late.pod_uid in monitor.ledger, what="node-1's decision")
        await app.collect_once()
        await wait_until(lambda: any(isinstance(e, Usage) and len(e.containers) == 2 for e in usage),
                         what="node-1's usage")
        assert {e.node for e in usage} == {"node-1"}


async def test_a_nodes_consumer_comes_back_under_a_new_name_after_a_reconnect(
        callout: CalloutRig, caplog: pytest.LogCaptureFixture) -> None:
    """The server keeps the old named consumer across a client reconnect; re-creating it under the
    same name would be an update the server refuses (10012), so it is made under a new one."""
    caplog.set_level(logging.WARNING, logger="shared.bus.client")
    role = await callout.role_bus()
    node1 = await callout.node_bus("node-1", await callout.token_file("node-1"))
    got: list[Event] = []
    await node1.route(("gpubus.allocation.released.*",), "node-1", lambda e: _append(got, e))
    await role.publish(AllocationReleased(node="node-1", pod_uid="u1", namespace="ns", name="p", why="t"))
    await wait_until(lambda: len(got) == 1, timeout=10)
    reconnects = node1.stats.reconnects
    await node1.nc.force_reconnect()
    await wait_until(lambda: node1.stats.reconnects > reconnects and node1.is_connected, timeout=15)
    await role.publish(AllocationReleased(node="node-1", pod_uid="u2", namespace="ns", name="p", why="t"))
    await wait_until(lambda: len(got) == 2, timeout=30)
    assert not [r for r in caplog.records if "10012" in r.getMessage()]
