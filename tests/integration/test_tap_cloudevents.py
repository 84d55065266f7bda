"""``gpubus tap --cloudevents`` as a user runs it: the real CLI in a subprocess against a real server.

Cases: replayed events come out one CloudEvent per line, in order, read back by the CloudEvents SDK
with the published event's id, type, subject and data; an undecodable message goes to stderr and
stdout stays CloudEvents only; --json with --cloudevents is a one-line error with exit code 2.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from shared.bus import Bus
from shared.events import AllocationReleased, DeviceHealth

ROOT = Path(__file__).resolve().parents[2]


async def run_tap(url: str, *args: str) -> tuple[int, list[str], str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "tap", "--nats", url, "--timeout", "20", *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode().splitlines(), err.decode()


async def test_tap_prints_cloudevents_the_sdk_reads(bus: Bus, nats_url: str) -> None:
    uid = uuid.uuid4().hex
    sent = [AllocationReleased(pod_uid=uid, namespace="ns", name="web", why="deleted", node="n1"),
            DeviceHealth(uuid="GPU-9", healthy=False, reason="Xid 79", node="n2")]
    for event in sent:
        await bus.publish(event)
    await bus.js.publish("gpubus.device.health.n2", b"\xc1 not msgpack")
    await bus.publish(DeviceHealth(uuid="GPU-9", healthy=True, node="n2"))

    code, lines, err = await run_tap(nats_url, "--all", "--cloudevents", "--count", "3")

    assert code == 0, err
    read = [JSONFormat().read(CloudEvent, line.encode()) for line in lines]
    assert [e.get_id() for e in read[:2]] == [e.id for e in sent]
    assert [e.get_type() for e in read] == ["io.gpubus.allocation.released.v1", "io.gpubus.device.health.v1",
                                            "io.gpubus.device.health.v1"]
    assert [e.get_subject() for e in read] == ["gpubus.allocation.released.n1", "gpubus.device.health.n2",
                                               "gpubus.device.health.n2"]
    assert read[0].get_source() == "/gpubus/test"
    assert read[1].get_data() == {**json.loads(lines[1])["data"], "reason": "Xid 79", "healthy": False}
    assert json.loads(err.strip().splitlines()[-1])["undecodable"] is True


async def test_json_and_cloudevents_together_are_refused(nats_url: str) -> None:
    code, lines, err = await run_tap(nats_url, "--json", "--cloudevents")
    assert (code, lines) == (2, [])
    assert "--json and --cloudevents: give one or the other" in err
