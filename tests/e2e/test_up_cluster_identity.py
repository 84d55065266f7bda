"""``gpubus up --nats-cluster 3`` keeps per-node identity on: every server of the cluster sends
clients to the auth callout, so a node's token lets it in as that node only, on any server.

Case matrix (one stack, 2 nodes, 3 servers): the authn child runs; on each server, node-1's token
connects and may publish node-1's inventory, is refused node-2's and the scheduler's decisions;
a made-up token is refused at connect.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
import pytest_asyncio
from e2e_harness import E2E, running_stack
from nats_refusal import refused_at_connect

from gpubus_local.sim.node_identity import node_token_file
from shared.bus.scope import node_inbox_prefix

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest_asyncio.fixture
async def e2e(tmp_path: Path) -> AsyncIterator[E2E]:
    async with running_stack(tmp_path / "stack", nodes=2, devices="1xA100-80GB",
                             configure=lambda s: dataclasses.replace(s, nats_cluster=3)) as handle:
        yield handle


async def _publish(url: str, token: str, node: str, subject: str) -> bool:
    """Publish once as the node; True if the server let it through (no permissions violation)."""
    violation = asyncio.Event()

    async def on_error(e: Exception) -> None:
        if "permissions violation" in str(e).lower():
            violation.set()

    nc = await nats.connect(url, token=token, inbox_prefix=node_inbox_prefix(node), error_cb=on_error,
                            allow_reconnect=False, connect_timeout=5)
    try:
        await nc.publish(subject, b"x")
        await nc.flush(timeout=5)
        try:  # a violation arrives after the flush's PONG at the latest... or never
            await asyncio.wait_for(violation.wait(), 2)
        except TimeoutError:
            return True
        return False
    finally:
        await nc.close()


async def test_every_server_of_the_cluster_lets_a_node_in_as_itself_only(e2e: E2E, tmp_path: Path) -> None:
    assert "authn" in e2e.stack.children
    node, other = e2e.stack.node_names()
    token = (await node_token_file(e2e.kube, node, tmp_path)).read_text()
    for name, server in e2e.stack.nats_cluster.servers.items():
        assert await _publish(server.url, token, node, f"gpubus.device.health.{node}"), name
        for subject in (f"gpubus.device.health.{other}", f"gpubus.allocation.decided.{node}"):
            assert not await _publish(server.url, token, node, subject), (name, subject)
        assert await refused_at_connect(server.port, "not-a-token"), name
