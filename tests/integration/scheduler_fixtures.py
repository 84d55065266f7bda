"""Pytest fixtures of the scheduler integration tests (registered with ``pytest_plugins``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import ExtenderClient, scheduler_app

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.handlers import WatchSettings
from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from shared.bus import Bus


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
