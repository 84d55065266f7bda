"""Device health on a node: the follower and the health query's parser.

Cases: a source whose health stream ends (health checks disabled, no GPUs) leaves the follower
waiting for the stop, not ending (a root task that ends stops the agent); a change from the stream
is applied, counted and published; the query names a GPU by UUID or index, and anything else is a
ValueError that says what was expected.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.node_agent.advertised import Advertised
from services.node_agent.discovery import HealthChange, PhysicalDevice
from services.node_agent.health import Health, parse_health_request
from services.node_agent.metrics import NodeAgentMetrics
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.simulated import SimulatedSource
from shared.events import DeviceHealth, Event
from shared.lifetime import TaskSet

SETTINGS = NodeAgentSettings(node_name="n", simulate="2xT4")


class Stream:
    """A device source whose health stream yields ``changes`` and then ends."""

    def __init__(self, *changes: HealthChange) -> None:
        self.changes = changes
        self.ended = asyncio.Event()
        self.gpus = SimulatedSource("n", "2xT4").devices()

    def devices(self) -> tuple[PhysicalDevice, ...]:
        return self.gpus

    async def health_changes(self) -> AsyncIterator[HealthChange]:
        for change in self.changes:
            yield change
        self.ended.set()

    async def close(self) -> None:
        return None


def _health(source: Stream, events: list[Event]) -> tuple[Health, Advertised, NodeAgentMetrics]:
    advertised = Advertised(source.gpus, SETTINGS)
    metrics = NodeAgentMetrics()
    return Health("n", source, advertised, metrics, events.append), advertised, metrics


async def test_a_health_stream_that_ends_leaves_the_follower_waiting_not_dead() -> None:
    source, events, fatal = Stream(), list[Event](), list[BaseException]()
    health, _, _ = _health(source, events)
    tasks = TaskSet("n", on_fatal=fatal.append)
    follower = tasks.spawn("health", health.follow(), root=True)
    await source.ended.wait()
    await asyncio.sleep(0)  # one step: the follower is past the stream's end
    assert not follower.done() and fatal == []
    await tasks.close()
    assert follower.cancelled() and fatal == []


async def test_a_change_is_applied_counted_and_published() -> None:
    gpu = Stream().gpus[0].uuid
    source, events = Stream(HealthChange(uuid=gpu, healthy=False, reason="xid 79")), list[Event]()
    health, advertised, metrics = _health(source, events)
    tasks = TaskSet("n")
    tasks.spawn("health", health.follow(), root=True)
    await source.ended.wait()
    assert [(e.uuid, e.healthy) for e in events if isinstance(e, DeviceHealth)] == [(gpu, False)]
    assert metrics.registry.get_sample_value("gpubus_node_agent_devices", {"health": "unhealthy"}) == 1.0
    assert not next(d for d in advertised.snapshot.devices if d.id == gpu).health
    await tasks.close()


def test_the_query_names_a_gpu_by_uuid_or_index() -> None:
    source = Stream()
    advertised = Advertised(source.gpus, SETTINGS)
    named = f'{{"uuid": "{source.gpus[1].uuid}", "healthy": false}}'.encode()
    by_uuid = parse_health_request(named, advertised, "n")
    by_index = parse_health_request(b'{"index": 1, "healthy": false, "reason": "test"}', advertised, "n")
    assert by_uuid.uuid == by_index.uuid == source.gpus[1].uuid and by_index.reason == "test"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"not json", "health request is not JSON"),
        (b"[" * 100_000, "health request is not JSON"),
        (b'{"uuid": "GPU-x"}', 'expected {"uuid" or "index", "healthy": bool, "reason"}'),
        (b'{"uuid": "GPU-nope", "healthy": true}', "no GPU 'GPU-nope' on node n"),
        (b'{"index": 7, "healthy": true}', "no GPU 7 on node n"),
        (b'{"index": true, "healthy": true}', "no GPU True on node n"),
    ],
)
def test_a_query_that_names_no_gpu_of_the_node_is_refused(payload: bytes, message: str) -> None:
    source = Stream()
    with pytest.raises(ValueError) as e:
        parse_health_request(payload, Advertised(source.gpus, SETTINGS), "n")
    assert message in str(e.value)
