"""Every stream states how many consumers it may hold, so per-node identity reaches 1000+ nodes.

nats-server 2.15 caps a stream that sets no ``max_consumers`` at 1000 (``default_max_consumers``):
at 1000 nodes with per-node identity each node-agent's own consumer made the 1000th refused
(``bench/e2e.py --nodes 1000``: JetStream error 10026). Case matrix: the arithmetic (each node's
consumers x 1000 nodes, plus the roles', fits the setting); a real server: the schema sets the
limit on the stream and every bucket, an existing stream made with none is raised, and consumer
1001 on ``GPUBUS`` is created where it was refused.
"""

from __future__ import annotations

from pathlib import Path

from bus_settings import bus_settings
from nats.js import api
from natsproc import NatsServerProcess

from services.node_agent.app import DECISION_SUBJECTS
from shared.bus import STREAM, Bus, BusSettings
from shared.bus.scope import scoped_filters

#: What one node's monitor follows on a node-scoped connection (services.monitor.app.subjects).
MONITOR_SUBJECTS = ("gpubus.allocation.*.node-1", "gpubus.allocation.released._",
                    "gpubus.inventory.snapshot.node-1")
#: Role consumers besides the nodes' (scheduler's routes and subscriptions, dashboards, taps).
ROLE_HEADROOM = 200


def test_a_thousand_nodes_fit_the_consumer_limit() -> None:
    agent, monitor = scoped_filters(DECISION_SUBJECTS, "node-1"), scoped_filters(MONITOR_SUBJECTS, "node-1")
    per_node = len(agent) + len(monitor)
    assert per_node == 4
    assert 1000 * per_node + ROLE_HEADROOM <= BusSettings().max_consumers


async def test_every_stream_states_its_consumer_limit(tmp_path: Path) -> None:
    server = NatsServerProcess(tmp_path / "nats")
    server.start()
    try:
        old = await Bus.connect(bus_settings(server.url), source="old")
        try:  # a stream made before the limit existed (none set: the server's default of 1000)
            await old.js.add_stream(api.StreamConfig(name=STREAM, subjects=["gpubus.pod.>"],
                                                     max_consumers=-1))
        finally:
            await old.close()
        bus = await Bus.connect(bus_settings(server.url, max_consumers=1500), source="test")
        try:
            await bus.ensure_schema()
            for stream in (STREAM, "KV_inventory", "KV_allocations", "KV_locks"):
                assert (await bus.js.stream_info(stream)).config.max_consumers == 1500, stream
            for i in range(1001):  # the 1001st was refused with 10026 under the server's default
                await bus.js.add_consumer(STREAM, api.ConsumerConfig(
                    name=f"node-{i}", filter_subject=f"gpubus.allocation.*.node-{i}",
                    ack_policy=api.AckPolicy.NONE, mem_storage=True, inactive_threshold=60.0))
            assert (await bus.js.stream_info(STREAM)).state.consumer_count == 1001
        finally:
            await bus.close()
    finally:
        server.stop()
