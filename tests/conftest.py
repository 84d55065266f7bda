"""Shared fixtures: a real nats-server for the session and a connected, schema-ensured Bus;
and the guard that fails a test which leaves asyncio tasks running (style item 14).

``GPUBUS_TEST_NATS_URL`` points the tests at an existing server instead of starting one.
Tests that take NATS down use their own server (``private_nats``), never the session one.

The task guard compares the session loop's pending tasks before a test's setup with those left
after its teardown. Tasks started while a module- or session-scoped fixture was set up are
long-lived by design and ignored; a test that uses such a fixture is not checked at all, because
the tasks those long-lived components start later (request handlers, reconnects) cannot be told
apart from the test's own. A leftover task gets a bounded moment to finish (a cancellation in
flight), then it is cancelled and the test fails naming it. ``@pytest.mark.leaks_tasks("why")``
exempts a test whose leak is known and outside our code (say which and why in the reason).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from bus_settings import bus_settings
from natsproc import NatsServerProcess

from gpubus_local.natsserver import PORT_SLICE_ENV
from shared.bus import STREAM, Bus

# Each xdist worker (and every process it starts) picks free ports from a slice of its own: a test
# that kills a server and revives it on the same port must not find a neighbour's server there.
_worker, _workers = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
if _worker.startswith("gw") and _workers.isdigit():
    os.environ[PORT_SLICE_ENV] = f"{_worker[2:]}/{_workers}"


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


# -- the leaked-task guard --------------------------------------------------------------------
Task = asyncio.Task[Any]
SETTLE_S = 2.0
"""How long leftover tasks may take to finish after teardown (a cancellation still in flight)."""

_session: dict[str, asyncio.AbstractEventLoop] = {}
_long_lived: weakref.WeakSet[Task] = weakref.WeakSet()
_spawners: set[str] = set()
"""Module/session-scoped fixtures whose setup started tasks (their tests are not checked)."""
_BEFORE = pytest.StashKey[set[Task]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "leaks_tasks(reason): exempt from the leaked-task guard (say why)")


@pytest_asyncio.fixture(scope="session", autouse=True)
async def _session_loop() -> asyncio.AbstractEventLoop:
    """Remembers the session loop so the guard can list its tasks between tests."""
    loop = asyncio.get_running_loop()
    _session["loop"] = loop
    return loop


def _pending() -> set[Task]:
    loop = _session.get("loop")
    if loop is None or loop.is_closed():
        return set()
    return {t for t in asyncio.all_tasks(loop) if not t.done()}


def _run_briefly(tasks: set[Task]) -> set[Task]:
    """Let the (idle) session loop run until ``tasks`` finish or SETTLE_S passes; the unfinished."""
    loop = _session["loop"]
    loop.run_until_complete(asyncio.wait(tasks, timeout=SETTLE_S))
    return {t for t in tasks if not t.done()}


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Generator[
        None, Any, Any]:
    if fixturedef.scope == "function":
        return (yield)
    before = _pending()
    try:
        return (yield)
    finally:
        started = _pending() - before
        if started:
            _long_lived.update(started)
            _spawners.add(fixturedef.argname)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_BEFORE] = _pending()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    result = yield
    if _spawners & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("leaks_tasks"):
        return result
    leftover = _pending() - item.stash.get(_BEFORE, set()) - set(_long_lived)
    if leftover:
        leftover = _run_briefly(leftover)
    if leftover:
        names = sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in leftover)
        for t in leftover:
            t.cancel()
        _run_briefly(leftover)
        pytest.fail(f"test left {len(names)} asyncio task(s) running: {'; '.join(names)}", pytrace=False)
    return result
