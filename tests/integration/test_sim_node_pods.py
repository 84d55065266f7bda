"""The kubelet stand-in (``SimNode``) against a real SimApiServer: the pods bound to its node.

Case matrix: without a pod log directory, a running pod that is deleted is forgotten (its run is
cancelled, it is not started again) and the node goes on: a pod bound after it still starts, and no
loop of the node dies.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import sim_fixtures
from asyncwait import wait_until

from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.node import SimNode, SimNodeSettings
from shared.kube_types import Pod

server = sim_fixtures.server
kube = sim_fixtures.kube

NODE = "node-1"


async def bound_pod(kube: SimKubeClient, name: str) -> Pod:
    pod = await kube.create_pod("default", {"metadata": {"name": name},
                                            "spec": {"containers": [{"name": "main", "image": "cuda"}]}})
    await kube.bind_pod("default", name, pod["metadata"]["uid"], NODE, {})
    return pod


async def is_running(kube: SimKubeClient, name: str) -> bool:
    pod = await kube.get_pod("default", name)
    return ((pod or {}).get("status") or {}).get("phase") == "Running"


async def test_without_a_log_dir_a_deleted_pod_is_forgotten_and_not_started_again(
    kube: SimKubeClient,
) -> None:
    fatal: list[BaseException] = []
    with tempfile.TemporaryDirectory(prefix="gpubus-") as scratch:  # short: unix socket paths
        settings = SimNodeSettings(node=NODE, plugin_dir=Path(scratch) / "dp",
                                   pod_resources_socket=Path(scratch) / "pr.sock", default_duration_s=3600.0)
        sim = SimNode(settings, kube, on_fatal=fatal.append)
        assert sim.logs is None
        await sim.start()
        try:
            p = await bound_pod(kube, "p")
            await wait_until(lambda: is_running(kube, "p"), what="p running")
            running = sim._pods[p["metadata"]["uid"]]
            await kube.delete_pod("default", "p")
            await bound_pod(kube, "q")  # its watch event comes after p's DELETED
            await wait_until(lambda: is_running(kube, "q"), what="q running")
            assert p["metadata"]["uid"] not in sim._pods
            assert running.cancelled()
            assert sim.admitted == 2  # p and q, p only once
            assert not fatal
        finally:
            await sim.stop()
