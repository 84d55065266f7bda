"""``gpubus tap`` as a user runs it: the real CLI in a subprocess against the real server.

Cases: --all replays history as readable lines; --json gives JSON lines with kind/v;
--node and --pod filter; an undecodable message is printed, not dropped; an event whose time
no clock can show (NaN, inf, 1e300) is printed once, its time as the raw value, or as
undecodable where the codec refuses it, never a traceback; live events
arrive after start; a bad --since, --pod or --count, or --since with --all, is a
one-line error with exit code 2.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import msgpack
import pytest
from asyncwait import wait_until

from shared.bus import Bus
from shared.codec import to_wire
from shared.events import AllocationReleased, DeviceHealth

ROOT = Path(__file__).resolve().parents[2]


def released(node: str, ns: str = "ns", name: str = "p") -> AllocationReleased:
    return AllocationReleased(pod_uid=uuid.uuid4().hex, namespace=ns, name=name, why="deleted", node=node)


async def run_tap(url: str, *args: str) -> tuple[int, list[str], str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "tap", "--nats", url, "--timeout", "20", *args,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode().splitlines(), err.decode()


async def test_all_replays_history_as_readable_lines(bus: Bus, nats_url: str) -> None:
    await bus.publish(released("node-1", name="web"))
    await bus.publish(DeviceHealth(uuid="GPU-9", healthy=False, reason="Xid 79", node="node-2"))
    code, lines, _ = await run_tap(nats_url, "--all", "--count", "2")
    assert code == 0
    assert "allocation.released" in lines[0] and "node-1" in lines[0] and "ns/web" in lines[0]
    assert "device.health" in lines[1] and "GPU-9 UNHEALTHY" in lines[1]


async def test_json_lines_carry_kind_and_version(bus: Bus, nats_url: str) -> None:
    event = released("node-1")
    await bus.publish(event)
    code, lines, _ = await run_tap(nats_url, "--all", "--json", "--count", "1")
    body = json.loads(lines[0])
    assert code == 0
    assert (body["kind"], body["v"], body["id"]) == ("allocation.released", 1, event.id)
    assert body["source"] == "test"


async def test_node_and_pod_filters(bus: Bus, nats_url: str) -> None:
    await bus.publish(released("node-1", name="a"))
    await bus.publish(released("node-2", name="b"))
    await bus.publish(released("node-2", name="c"))
    _, by_node, _ = await run_tap(nats_url, "--all", "--node", "node-2", "--json", "--count", "2")
    assert [json.loads(x)["name"] for x in by_node] == ["b", "c"]
    _, by_pod, _ = await run_tap(nats_url, "--all", "--pod", "ns/c", "--json", "--count", "1")
    assert [json.loads(x)["name"] for x in by_pod] == ["c"]


async def test_undecodable_message_is_shown_not_dropped(bus: Bus, nats_url: str) -> None:
    await bus.js.publish("gpubus.allocation.released.node-1", msgpack.packb({"kind": "nope", "v": 1}))
    await bus.publish(released("node-1"))
    code, lines, _ = await run_tap(nats_url, "allocation.>", "--all", "--count", "2")
    assert code == 0
    assert "UNDECODABLE" in lines[0] and "gpubus.allocation.released.node-1" in lines[0]
    assert "unknown event kind" in lines[0]
    assert "allocation.released" in lines[1]


async def test_event_with_a_time_no_clock_can_show_is_printed_once(bus: Bus, nats_url: str) -> None:
    for i, ts in enumerate([float("nan"), float("inf"), 1e300]):
        body = msgpack.packb({**to_wire(released("node-t", name=f"p{i}")), "ts": ts,
                              "kind": "allocation.released", "v": 1})
        await bus.js.publish("gpubus.allocation.released.node-t", body)
    await bus.publish(released("node-t", name="fine"))
    code, lines, err = await run_tap(nats_url, "allocation.>", "--all", "--count", "4")
    assert code == 0 and "Traceback" not in err
    assert len(lines) == 4
    for line, raw in zip(lines[:2], ["ts=nan", "ts=inf"], strict=True):  # the codec may refuse these
        assert ("UNDECODABLE" in line and "gpubus.allocation.released.node-t" in line) or (
            line.startswith(raw) and "ns/p" in line)
    assert lines[2].startswith("ts=1e+300 allocation.released") and "ns/p2" in lines[2]
    assert "ns/fine" in lines[3]


async def test_live_events_arrive_after_start(bus: Bus, nats_url: str) -> None:
    await bus.publish(released("node-old"))
    before = {c.name for c in await bus.js.consumers_info("GPUBUS")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "tap", "--nats", nats_url, "--json", "--count", "1",
        "--timeout", "20", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    fresh = released("node-new")

    async def consumer_exists() -> bool:
        # Other tests' consumers may live on the shared server: wait for tap's own.
        return bool({c.name for c in await bus.js.consumers_info("GPUBUS")} - before)

    await wait_until(consumer_exists, timeout=20, what="tap to subscribe")
    await bus.publish(fresh)
    out, _ = await proc.communicate()
    assert json.loads(out.decode().splitlines()[0])["id"] == fresh.id


async def test_bad_since_is_a_one_line_error() -> None:
    code, _, err = await run_tap("nats://127.0.0.1:1", "--since", "yesterday")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: --since 'yesterday': expected a duration like 30s, 10m, 2h or 1d"]


@pytest.mark.parametrize(("args", "message"), [
    (("--since", "10m", "--all"), "error: --since and --all: give one or the other"),
    (("--count", "0"), "error: --count 0: must be at least 1"),
    (("--pod", "no-namespace"), "error: --pod 'no-namespace': expected NAMESPACE/NAME"),
])
async def test_bad_flags_are_a_one_line_error_with_exit_2(args: tuple[str, ...], message: str) -> None:
    code, _, err = await run_tap("nats://127.0.0.1:1", *args)
    assert code == 2
    assert err.strip().splitlines() == [message]


async def test_unreachable_nats_is_a_one_line_error() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpubus", "tap", "--nats", "nats://127.0.0.1:1",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"GPUBUS_BUS_INITIAL_CONNECT_TIMEOUT_S": "0.5", "PATH": "/usr/bin:/bin"})
    _, err = await proc.communicate()
    assert proc.returncode == 1
    assert err.decode().strip().splitlines()[-1].startswith("error: cannot connect to NATS")
