"""``pods/log`` of the SimApiServer on bad input and at the ends of a follow, over plain HTTP.

Case matrix: a Running container whose log file is missing (the kubelet's 400 "failed to try
resolving symlinks", plain and with ``follow``); ``follow`` ending once ``limitBytes`` is used up
while the container still runs; ``follow`` ending when the pod is deleted; the log of a pod that
does not exist (404). Also the kubelet stand-in's gRPC error text for codes grpc-go spells its own way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import grpc
import pytest

from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.kubelet import _rpc_error
from gpubus_local.sim.log_files import PodLogFiles
from gpubus_local.sim.node import running_status, sim_pod
from shared.kube_types import Pod

T0 = 1_577_836_800 * 1_000_000_000
LOG_URL = "/api/v1/namespaces/default/pods/p/log"


class Cluster:
    def __init__(self, api: SimApiServer, kube: SimKubeClient, files: PodLogFiles) -> None:
        self.api, self.kube, self.files = api, kube, files

    async def running_pod(self, name: str = "p") -> Pod:
        spec = {"containers": [{"name": "main", "image": "cuda"}]}
        pod = await self.kube.create_pod("default", cast(Pod, {"metadata": {"name": name}, "spec": spec}))
        await self.kube.bind_pod("default", name, pod["metadata"]["uid"], "node-1", {})
        await self.kube.patch_pod_status("default", name,
                                         running_status(sim_pod(pod, "nvidia.com/gpu"), "10.0.0.1"))
        return pod

    def write(self, pod: Pod, lines: list[str], *, new: bool = False) -> None:
        meta = pod["metadata"]
        self.files.write("default", meta["name"], meta["uid"], "main", lines=lines, time_ns=T0, new=new)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with SimApiServer(log_dir=tmp_path / "pods") as api:
        kube = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield Cluster(api, kube, PodLogFiles(tmp_path / "pods"))
        finally:
            await kube.close()


async def get(cluster: Cluster, path: str, **query: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(cluster.api.url + path, params=query) as r:
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body


@pytest.mark.parametrize("follow", [False, True])
async def test_a_running_container_without_a_log_file_is_a_400(cluster: Cluster, follow: bool) -> None:
    await cluster.running_pod()
    query = {"follow": "true"} if follow else {}
    status, body = await asyncio.wait_for(get(cluster, LOG_URL, **query), 10)
    assert status == 400
    assert body["reason"] == "BadRequest"
    assert "failed to try resolving symlinks in path" in body["message"]
    assert "no such file or directory" in body["message"]


async def test_follow_ends_once_limit_bytes_is_used_up(cluster: Cluster) -> None:
    pod = await cluster.running_pod()
    cluster.write(pod, ["Started container main", "second line"], new=True)
    # the container still runs: only the limit ends the stream
    answer = await asyncio.wait_for(get(cluster, LOG_URL, follow="true", limitBytes="7"), 10)
    assert answer == (200, "Started")


async def test_follow_ends_when_the_pod_is_deleted(cluster: Cluster) -> None:
    pod = await cluster.running_pod()
    cluster.write(pod, ["first"], new=True)
    async with aiohttp.ClientSession() as session, \
            session.get(cluster.api.url + LOG_URL, params={"follow": "true"}) as response:
        assert response.status == 200
        assert await asyncio.wait_for(response.content.readline(), 10) == b"first\n"
        async with session.delete(cluster.api.url + "/api/v1/namespaces/default/pods/p",
                                  params={"gracePeriodSeconds": "0"}) as deleted:
            assert deleted.status == 200, await deleted.text()
        assert await asyncio.wait_for(response.content.read(), 10) == b""


async def test_the_log_of_a_pod_that_does_not_exist_is_a_404(cluster: Cluster) -> None:
    status, body = await get(cluster, "/api/v1/namespaces/default/pods/nobody/log")
    assert status == 404
    assert (body["reason"], body["details"]["name"]) == ("NotFound", "nobody")
    assert body["message"] == 'pods "nobody" not found'


@pytest.mark.parametrize(("code", "printed"), [
    (grpc.StatusCode.CANCELLED, "Canceled"),  # grpc-go's spelling, not CANCELLED's title case
    (grpc.StatusCode.OK, "OK"),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "ResourceExhausted"),
])
def test_rpc_errors_print_as_grpc_go_does(code: grpc.StatusCode, printed: str) -> None:
    error = grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="gone")
    assert _rpc_error(error) == f"rpc error: code = {printed} desc = gone"
