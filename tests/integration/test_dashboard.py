"""``gpubus dashboard`` against a real nats-server over real HTTP.

Cases: it starts from the buckets and the stream's recent history; a page's JSON and its HTML
shell are served; a live page is pushed again over server-sent events when an event arrives;
an unknown node, card or pod in a URL is an HTML 404 (and a JSON 404 from the API), counted; a
bad ``at`` is a 400; an undecodable message is counted and shown in the feed, and the
dashboard goes on; time travel shows the cluster as it was before a pod was released, rebuilt
from the stream (both from a checkpoint and from the stream's start); writes are refused (405);
/healthz, /readyz and /metrics answer; a stop ends the open live pages instead of waiting for them;
a released pod's page shows it Finished; without the browser bundle every page is a 503 saying
how to build it (the page data is still served).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest_asyncio
from aiohttp.test_utils import TestServer
from asyncwait import wait_until
from bus_settings import bus_settings
from dashboard_builders import card_id, decided, inventory, released

from services.dashboard.app import Dashboard
from services.dashboard.server import build_app
from services.dashboard.settings import DashboardSettings
from shared.bus import INVENTORY, Bus
from shared.codec import encode
from shared.events import Event, subject_for
from shared.inventory_entries import encode_inventory


def settings(**kw: Any) -> DashboardSettings:
    return DashboardSettings(bind="127.0.0.1", port=0, push_interval_s=0.05, **kw)


async def publish(bus: Bus, event: Event) -> None:
    await bus.js.publish(subject_for(event), encode(event))


@pytest_asyncio.fixture
async def reader(nats_url: str) -> AsyncIterator[Bus]:
    b = await Bus.connect(bus_settings(nats_url), source="dashboard-test")
    try:
        yield b
    finally:
        await b.close()


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as resp:
        return resp.status, await resp.text()


async def started(exits: AsyncExitStack, reader: Bus, **kw: Any) -> Dashboard:
    """A dashboard entered on ``exits`` (the test closes it there), caught up with the stream."""
    dashboard = await exits.enter_async_context(Dashboard(settings(**kw), reader))
    await wait_until(dashboard.ready, 10, what="dashboard caught up")
    return dashboard


async def test_pages_pushes_404s_and_metrics(bus: Bus, reader: Bus) -> None:
    now = time.time()
    await (await bus.kv(INVENTORY)).put("n1", encode_inventory(inventory("n1", ts=now)))
    await publish(bus, decided("a", "n1", ts=now))
    exits = AsyncExitStack()
    dashboard = await started(exits, reader)
    base = f"http://127.0.0.1:{dashboard.port}"
    try:
        async with aiohttp.ClientSession() as session:
            status, body = await get(session, f"{base}/api/page?path=/nodes/n1")
            assert status == 200
            card = orjson.loads(body)["node"]["cards"][0]
            assert [s["pod"] for s in card["slices"]] == ["default/a"]
            status, shell = await get(session, f"{base}/nodes/n1")
            assert status == 200 and "/static/dist/app.js" in shell
            assert (await get(session, f"{base}/static/dist/app.js"))[0] == 200  # built by scripts/bootstrap

            for path in ("/nodes/nope", "/cards/GPU-nope", "/pods/default/nope", "/nowhere"):
                status, text = await get(session, f"{base}{path}")
                assert status == 404 and "<h1>404 Not found</h1>" in text, path
            status, text = await get(session, f"{base}/api/page?path=/pods/default/nope")
            assert status == 404 and orjson.loads(text)["status"] == 404
            assert (await get(session, f"{base}/api/page?path=/&at=yesterday"))[0] == 400
            async with session.post(f"{base}/api/page?path=/") as resp:
                assert resp.status == 405

            pushed = await _second_push(session, f"{base}/api/stream?path=/nodes/n1",
                                        lambda: publish(bus, decided("b", "n1", 1, ts=now + 1)))
            assert [s["pod"] for s in pushed["node"]["cards"][1]["slices"]] == ["default/b"]

            await bus.js.publish("gpubus.allocation.decided.n1", b"\xc1 not msgpack")
            await wait_until(lambda: dashboard.timeline.view.undecodable == 1, 10, what="undecodable counted")
            feed = orjson.loads((await get(session, f"{base}/api/page?path=/events&node=n1"))[1])
            assert feed["entries"][0]["undecodable"] is True and feed["status"]["undecodable"] == 1
            await publish(bus, released("a", "n1", ts=now + 2))
            await wait_until(lambda: ("default", "a") not in dashboard.timeline.view.pods, 10, what="release")

            assert (await get(session, f"{base}/healthz"))[0] == 200
            assert (await get(session, f"{base}/readyz"))[0] == 200
            metrics = (await get(session, f"{base}/metrics"))[1]
            assert "gpubus_dashboard_undecodable_total 1.0" in metrics
            assert "gpubus_dashboard_not_found_total 5.0" in metrics
            assert "gpubus_dashboard_pushes_total" in metrics
    finally:
        await exits.aclose()


async def test_time_travel_rebuilds_the_cluster_before_a_release(bus: Bus, reader: Bus) -> None:
    now = time.time()
    await publish(bus, inventory("n1", ts=now))
    await publish(bus, decided("a", "n1", ts=now))
    exits = AsyncExitStack()
    dashboard = await started(exits, reader, checkpoint_interval_s=0.001)
    base = f"http://127.0.0.1:{dashboard.port}"
    try:
        before = dashboard.timeline.view.at
        await publish(bus, released("a", "n1", ts=now + 1))
        await wait_until(lambda: ("default", "a") not in dashboard.timeline.view.pods, 10, what="release")
        async with aiohttp.ClientSession() as session:
            status, body = await get(session, f"{base}/api/page?path=/nodes/n1&at={before}")
            assert status == 200
            then = orjson.loads(body)
            assert then["live"] is False
            assert [s["pod"] for s in then["node"]["cards"][0]["slices"]] == ["default/a"]
            assert (await get(session, f"{base}/pods/default/a?at={before}"))[0] == 200
            status, body = await get(session, f"{base}/api/page?path=/pods/default/a&at={before}")
            assert orjson.loads(body)["pod"]["phase"] == "Starting"
            status, body = await get(session, f"{base}/api/page?path=/pods/default/a")  # finished: history
            assert status == 200 and orjson.loads(body)["pod"]["phase"] == "Finished"
            assert orjson.loads(body)["pod"]["node"] == "n1"
            # before the first checkpoint: folded from the stream's first message
            first = orjson.loads((await get(session, f"{base}/api/timeline"))[1])["first"]
            assert first > 0
            status, body = await get(session, f"{base}/api/page?path=/&at={first + 0.0001}")
            assert status == 200 and orjson.loads(body)["nodes"] == 1
            assert card_id("n1", 0) in (await get(session, f"{base}/api/page?path=/nodes/n1&at={before}"))[1]
    finally:
        await exits.aclose()


async def _second_push(session: aiohttp.ClientSession, url: str, change: Any) -> dict[str, Any]:
    """Open a live stream, make ``change`` after its first push, return the next push's page."""
    async with session.get(url) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
        pages, kind = 0, b""
        async with asyncio.timeout(10):
            async for line in resp.content:
                if line.startswith(b"event: "):
                    kind = line[len(b"event: "):].strip()
                if not line.startswith(b"data: ") or kind != b"page":
                    continue
                pages += 1
                if pages == 1:
                    await change()
                    continue
                body: dict[str, Any] = orjson.loads(line[len(b"data: "):])
                if len(body["node"]["cards"][1]["slices"]) == 1:
                    return body
    raise AssertionError("the stream ended")


async def test_a_stop_ends_the_open_live_pages(bus: Bus, reader: Bus) -> None:
    """A live page waits for the next change; the stop must end it, not wait out aiohttp's grace."""
    now = time.time()
    await (await bus.kv(INVENTORY)).put("n1", encode_inventory(inventory("n1", ts=now)))
    exits = AsyncExitStack()
    dashboard = await started(exits, reader)
    closing: asyncio.Task[None] | None = None
    try:
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{dashboard.port}/api/stream?path=/nodes/n1") as stream:
            assert stream.status == 200
            while b"event: page" not in await stream.content.readline():
                pass
            await wait_until(lambda: dashboard.deps.streams == 1, 10, what="the live page is open")
            closing = asyncio.create_task(exits.aclose())
            async with asyncio.timeout(10):  # without the stop hook: 60 s, until aiohttp gives up
                rest = await stream.content.read()
            assert b"event: page" not in rest  # nothing changed: the stop, not a push, ended it
            await closing
            assert dashboard.deps.streams == 0
    finally:
        if closing is None:
            await exits.aclose()


async def test_without_its_bundle_every_page_says_how_to_build_it(reader: Bus, tmp_path: Path) -> None:
    (tmp_path / "index.html").write_bytes(b"<!doctype html><script src='/static/dist/app.js'></script>")
    exits = AsyncExitStack()
    dashboard = await started(exits, reader)
    server = TestServer(build_app(dataclasses.replace(dashboard.deps, static_dir=tmp_path)), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/", "/pods", "/events"):
                status, text = await get(session, str(server.make_url(path)))
                assert status == 503 and "npm ci &amp;&amp; npm run build" in text, path
            assert (await get(session, str(server.make_url("/api/page?path=/"))))[0] == 200  # the data is
    finally:
        await server.close()
        await exits.aclose()
