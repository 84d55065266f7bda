"""The Go and TypeScript consumer examples against a real nats-server and real gpubus events.

Matrix, for each consumer (go, ts): events published by the product's own publisher (every kind,
two nodes and none) plus a newer major, an unknown kind, a body missing a required field and a body
that is not msgpack, read from a start time that excludes earlier events -> the per-node summary
equals what was published, the newer and unknown are skipped, the bad two counted invalid; a start
time after everything -> an empty summary; a recorded ``gpubus up`` run replayed into the stream ->
the summary of the recording as the Python codec decodes it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import pytest
from asyncwait import wait_until
from consumer_builds import SCHEMAS, go_consumer, ts_consumer
from event_recording import load, replay
from event_samples import inventory, node_events

from shared.bus import Bus
from shared.codec import decode, encode
from shared.events import (
    CATALOGUE,
    AllocationDecided,
    DeviceHealth,
    Event,
    Inventory,
    PodAdmitted,
    PodRejected,
)

pytestmark = pytest.mark.timeout(900)  # a cold Go build with module downloads on 2 busy cores

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "events" / "recorded-run.msgpack"
BUILDERS: dict[str, Callable[[], list[str]]] = {"go": go_consumer, "ts": ts_consumer}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def consumer(request: pytest.FixtureRequest) -> list[str]:
    return BUILDERS[request.param]()


def expected_summary(events: list[Event], *, invalid: int = 0, skipped: int = 0) -> dict[str, Any]:
    """What the consumers print, computed from the decoded events."""
    nodes: dict[str, dict[str, Any]] = {}
    for e in events:
        n = nodes.setdefault(e.node or "_", {"kinds": {}, "devices": 0, "allocated_mib": 0, "unhealthy": 0})
        n["kinds"][e.KIND] = n["kinds"].get(e.KIND, 0) + 1
        if isinstance(e, Inventory):
            n["devices"] = len(e.devices)
        elif isinstance(e, AllocationDecided):
            n["allocated_mib"] += sum(card.usedmem for slot in e.allocation.devices for card in slot)
        elif isinstance(e, DeviceHealth) and not e.healthy:
            n["unhealthy"] += 1
    return {"events": len(events), "invalid": invalid, "skipped": skipped, "nodes": nodes}


async def run_consumer(command: list[str], nats_url: str, since: float) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(since, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    proc = await asyncio.create_subprocess_exec(
        *command, "--nats", nats_url, "--schemas", str(SCHEMAS), "--since", stamp, "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, f"{command} exited {proc.returncode}: {err.decode()}"
    summary: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return summary


async def start_time() -> float:
    """A whole millisecond after every message stored so far (the TS client's Date has ms precision)."""
    since = math.ceil(time.time() * 1000) / 1000 + 0.001
    await wait_until(lambda: time.time() >= since, timeout=5)
    return since


async def test_consumer_summarises_what_the_publisher_published(bus: Bus, consumer: list[str],
                                                                 nats_url: str) -> None:
    await bus.publish(inventory("node-before"))  # before the start time: not in the summary
    since = await start_time()
    published = [*node_events("node-a"), *node_events("node-b"),
                 PodRejected(namespace="team", name="no-node", reason="bad quantity")]
    for event in published:
        await bus.publish(event)
    newer = msgpack.unpackb(encode(published[1]), raw=False) | {"v": PodAdmitted.VERSION + 1, "id": "newer"}
    unknown = {"kind": "pod.resized", "v": 1, "id": "unknown", "node": "node-a"}
    missing = msgpack.unpackb(encode(published[-1]), raw=False)
    del missing["reason"]
    for subject, data in (("gpubus.pod.admitted.node-a", msgpack.packb(newer)),
                          ("gpubus.pod.resized.node-a", msgpack.packb(unknown)),
                          ("gpubus.pod.rejected._", msgpack.packb(missing)),
                          ("gpubus.pod.rejected._", b"\xc1 not msgpack")):
        await bus.js.publish(subject, data)

    summary = await run_consumer(consumer, nats_url, since)

    assert summary == expected_summary(published, invalid=2, skipped=2)
    assert set(summary["nodes"]) == {"node-a", "node-b", "_"}
    assert len(summary["nodes"]["node-a"]["kinds"]) == len(CATALOGUE)  # every kind, decoded and validated


async def test_consumer_started_after_every_event_reports_none(bus: Bus, consumer: list[str],
                                                               nats_url: str) -> None:
    await bus.publish(inventory("node-a"))
    since = await start_time()
    assert await run_consumer(consumer, nats_url, since) == expected_summary([])


async def test_consumer_reads_a_replayed_recorded_run(bus: Bus, consumer: list[str], nats_url: str) -> None:
    recording = load(RECORDING)
    since = await start_time()
    await replay(bus.js, recording, replay_id=uuid.uuid4().hex)

    summary = await run_consumer(consumer, nats_url, since)

    decoded = [decode(m["data"]) for m in recording]
    assert summary == expected_summary(decoded)
    assert {"node-1", "node-2", "_"} == set(summary["nodes"])
    assert summary["nodes"]["node-1"]["devices"] == 2
