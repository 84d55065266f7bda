"""A SimApiServer (bookmarks every 0.05 s), a kubeconfig for it and the real SimKubeClient on it: the
fixtures ``server``, ``config`` and ``kube`` of the test modules that bind them by name, which makes
them that module's own::

    import sim_fixtures

    server = sim_fixtures.server
    config = sim_fixtures.config  # for kubectl
    kube = sim_fixtures.kube

Never register this module with ``pytest_plugins``: that makes its fixtures global, and this ``kube``
would then shadow, or be shadowed by, ``scheduler_fixtures``' own ``kube`` (which sits on its ``api``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.handlers import WatchSettings
from gpubus_local.sim.kube import SimKubeClient


@pytest.fixture
async def server() -> AsyncIterator[SimApiServer]:
    async with SimApiServer(watch=WatchSettings(bookmark_interval_s=0.05)) as api:
        yield api


@pytest.fixture
def config(server: SimApiServer, tmp_path: Path) -> Path:
    """The kubeconfig of ``server`` (what ``kubectl --kubeconfig`` is given)."""
    return server.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
async def kube(server: SimApiServer, tmp_path: Path) -> AsyncIterator[SimKubeClient]:
    client = await SimKubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
    yield client
    await client.close()
