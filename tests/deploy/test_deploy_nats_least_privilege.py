"""Least privilege per NATS role: for every role, one thing it needs is allowed and the writes it
has no business making are refused, on a real nats-server run with the example config and with the
Helm chart's users (the ``server`` fixture of :mod:`test_deploy_nats_auth` runs both).

Case matrix (role -> allowed / refused):
- tap: reads an event / publishes the scheduler's bind query, any query, a KV message delete
- webhook: makes the schema and announces an admission / deletes a ledger message, deletes a
  consumer, purges the stream, reads a bucket
- authn: serves the callout (the node fixture logs a node in through it) / publishes any subject
- scheduler, node-agent, monitor, dashboard: covered by :mod:`test_deploy_nats_auth` (each its own
  allowed work and a refused subject of another stage)
"""
# ruff: noqa: F811  (the imported fixtures are named as test arguments)

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from test_deploy_nats_auth import (  # noqa: F401  (fixtures)
    ConfiguredServer,
    _ignore,
    _password,
    _refused,
    _stored,
    connect,
    node_identity,
    server,
)

from shared.bus import INVENTORY

TAP_FORBIDDEN = ("gpubus.query.scheduler.bind", "gpubus.query.health.node-1", "gpubus.query.sim.node-1",
                 "$JS.API.STREAM.MSG.DELETE.KV_allocations", "$JS.API.STREAM.UPDATE.GPUBUS")
WEBHOOK_FORBIDDEN = ("$JS.API.STREAM.MSG.DELETE.KV_allocations", "$JS.API.CONSUMER.DELETE.GPUBUS.x",
                     "$JS.API.STREAM.PURGE.GPUBUS", "$JS.API.STREAM.DELETE.KV_locks",
                     "$JS.API.DIRECT.GET.KV_allocations.$KV.allocations.x",
                     "$JS.API.CONSUMER.CREATE.GPUBUS", "gpubus.query.scheduler.bind")


async def test_tap_reads_events_but_may_not_ask_the_scheduler_to_bind(
        connect: Any, server: ConfiguredServer) -> None:
    writer = await connect("scheduler")
    await writer.ensure_schema()
    assert await _stored(writer, "gpubus.allocation.released.node-lp")
    tap = await connect("tap")
    seen = asyncio.Event()

    async def on_raw(subject: str, data: bytes, error: Exception) -> None:
        seen.set()

    await tap.subscribe("gpubus.allocation.released.node-lp", _ignore, deliver="all", on_decode_error=on_raw)
    await asyncio.wait_for(seen.wait(), 5)
    for subject in TAP_FORBIDDEN:
        assert await _refused(server, subject, role="tap"), subject


async def test_tap_never_receives_query_traffic(connect: Any, server: ConfiguredServer) -> None:
    """A bind request carries a pod and a node; tap's wildcard subscription leaves queries out."""
    nc = await nats.connect(server.url, user="tap", password=_password("tap"), allow_reconnect=False)
    got: list[str] = []
    marker = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        got.append(msg.subject)
        if msg.subject == "gpubus.allocation.released.node-q":
            marker.set()

    try:
        await nc.subscribe("gpubus.>", cb=on_msg)
        await nc.flush()
        scheduler = await connect("scheduler")
        await scheduler.ensure_schema()
        await scheduler.nc.publish("gpubus.query.scheduler.bind", b"{}")
        await scheduler.nc.publish("gpubus.allocation.released.node-q", b"x")  # after it, in order
        await asyncio.wait_for(marker.wait(), 5)
    finally:
        await nc.close()
    assert "gpubus.query.scheduler.bind" not in got


async def test_webhook_makes_the_schema_and_announces_but_edits_nothing(
        connect: Any, server: ConfiguredServer) -> None:
    bus = await connect("webhook")
    await bus.ensure_schema()
    assert await _stored(bus, "gpubus.pod.admitted._")
    for subject in WEBHOOK_FORBIDDEN:
        assert await _refused(server, subject, role="webhook"), subject


async def test_authn_only_answers_callouts(node_identity: Any, server: ConfiguredServer) -> None:
    bus = await node_identity.bus("node-authn")  # logged in through the callout user
    assert (await bus.kv(INVENTORY)) is not None
    for subject in ("$SYS.REQ.USER.AUTH", "gpubus.pod.admitted._", "anything"):
        assert await _refused(server, subject, role="authn"), subject


@pytest.mark.parametrize("role", ["tap", "webhook", "dashboard"])
async def test_no_reader_or_announcer_may_bind(role: str, server: ConfiguredServer) -> None:
    assert await _refused(server, "gpubus.query.scheduler.bind", role=role)
