"""Shared fixtures: a real nats-server for the session and a connected, schema-ensured Bus.

``GPUBUS_TEST_NATS_URL`` points the tests at an existing server instead of starting one.
Tests that take NATS down use their own server (``private_nats``), never the session one.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from natsproc import NatsServerProcess

from shared.bus import STREAM, Bus, BusSettings


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real JetStream-enabled nats-server for the whole session."""
    external = os.environ.get("GPUBUS_TEST_NATS_URL")
    if external:
        yield external
        return
    server = NatsServerProcess(tmp_path_factory.mktemp("nats"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """A server of this test's own, to stop and restart (same port, same store)."""
    server = NatsServerProcess(tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def bus_settings(url: str, **overrides: object) -> BusSettings:
    """Settings tuned for tests: fast reconnects, short waits."""
    values: dict[str, object] = {"url": url, "name": "gpubus-test", "reconnect_wait_s": 0.1,
                                 "initial_connect_timeout_s": 5.0, "request_timeout_s": 2.0,
                                 "flush_timeout_s": 2.0}
    values.update(overrides)
    return BusSettings(**values)  # type: ignore[arg-type]


@pytest_asyncio.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    """A connected Bus with the schema ensured and empty event history and buckets."""
    b = await Bus.connect(bus_settings(nats_url), source="test")
    await b.ensure_schema()
    for stream in (STREAM, "KV_inventory", "KV_allocations", "KV_locks"):
        await b.js.purge_stream(stream)
    try:
        yield b
    finally:
        await b.close()
