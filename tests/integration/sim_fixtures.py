"""Fixtures of a SimApiServer on loopback and a KubeClient on its kubeconfig, for the tests that
talk to the API server stand-in directly (``pytest_plugins = ("sim_fixtures",)``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.sim.apiserver import SimApiServer
from services.sim.handlers import WatchSettings
from shared.kube import KubeClient


@pytest.fixture
async def server() -> AsyncIterator[SimApiServer]:
    """Bookmarks every 50 ms, so tests of idle watches see one soon."""
    async with SimApiServer(watch=WatchSettings(bookmark_interval_s=0.05)) as api:
        yield api


@pytest.fixture
async def kube(server: SimApiServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
    yield client
    await client.close()
