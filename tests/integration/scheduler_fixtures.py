"""Pytest fixtures of the scheduler integration tests (registered with ``pytest_plugins``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import ExtenderClient, fake_node_agent, scheduler_app
from scheduler_replicas import Schedulers

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.handlers import WatchSettings
from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from shared.bus import Bus, Subscription


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[SimApiServer]:
    async with SimApiServer(watch=WatchSettings(bookmark_interval_s=0.2)) as server:
        yield server


@pytest.fixture
async def kube(api: SimApiServer, tmp_path: Path) -> AsyncIterator[SimKubeClient]:
    client = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
    yield client
    await client.close()


@pytest.fixture
async def scheduler(
    bus: Bus, nats_url: str, api: SimApiServer, tmp_path: Path
) -> AsyncIterator[SchedulerApp]:
    async with scheduler_app(bus_settings(nats_url), api.write_kubeconfig(tmp_path / "kubeconfig")) as app:
        await wait_until(lambda: app.election.is_leader, what="leadership")
        await wait_until(app.reconciler.pods_synced.is_set, what="pods synced")
        yield app


@pytest.fixture
async def client(scheduler: SchedulerApp) -> AsyncIterator[ExtenderClient]:
    async with aiohttp.ClientSession() as session:
        yield ExtenderClient(session, scheduler.port)


@pytest.fixture
async def agent(bus: Bus) -> AsyncIterator[Subscription]:
    """A node-agent stand-in for every node: Allocate serves each decision at once (frees its slot)."""
    sub = await fake_node_agent(bus)
    yield sub
    await sub.stop()


@pytest.fixture
async def schedulers(
    bus: Bus, nats_url: str, kube: SimKubeClient, api: SimApiServer, tmp_path: Path
) -> AsyncIterator[Schedulers]:
    kubeconfig = api.write_kubeconfig(tmp_path / "kc")
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession())
        yield Schedulers(
            bus=bus, kube=kube, nats_url=nats_url, kubeconfig=kubeconfig, stack=stack, session=session
        )
