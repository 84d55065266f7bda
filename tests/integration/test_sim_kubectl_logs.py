"""The real ``kubectl logs`` against the SimApiServer, reading logs written by the kubelets' own writer.

Pods are created, bound and marked Running through the API as the simulated kubelet does (its
status patch), and their logs written with ``PodLogFiles``, what the kubelet stand-in writes with.

Case matrix: ``logs`` of a running pod; ``--tail``; ``--timestamps``; ``--limit-bytes``; ``-c`` of the
second container (and kubectl's default, the first); an unknown container (kubectl's own check, and
the server's 400 through ``get --raw``); a bound pod not started yet (the kubelet's ContainerCreating
400); an unscheduled one (empty, as a real server answers); an invalid ``tailLines`` (422, printed from
the causes); ``-f`` streaming a line written after it started and ending when the container ends;
``-f`` of a finished container returning at once; the ``pods/log`` entry in discovery; a server
without a log directory (404 that says why).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
from kubectl import kubectl, needs_kubectl, spawn_kubectl

from gpubus_local.sim import pod_logs
from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.log_files import PodLogFiles
from gpubus_local.sim.node import running_status, sim_pod, succeeded_status
from shared.kube_types import Pod

pytestmark = needs_kubectl

T0 = 1_577_836_800 * 1_000_000_000  # 2020-01-01T00:00:00Z: well in the past
LOG_URL = "/api/v1/namespaces/default/pods/p/log"
MAIN = ["Started container main of pod default/p on node node-1 (simulated by gpubus)",
        "GPU 0: A100-SXM4-80GB (UUID: GPU-aaaa)  memory limit 3000 MiB  SM limit 30 %"]


@dataclass
class Cluster:
    api: SimApiServer
    kube: SimKubeClient
    config: Path
    files: PodLogFiles

    async def pod(self, name: str, *containers: str, node: str | None = "node-1",
                  running: bool = True) -> Pod:
        spec = {"containers": [{"name": c, "image": "cuda"} for c in containers or ("main",)]}
        pod = await self.kube.create_pod("default", cast(Pod, {"metadata": {"name": name}, "spec": spec}))
        if node is not None:
            await self.kube.bind_pod("default", name, pod["metadata"]["uid"], node, {})
        if running:
            await self.kube.patch_pod_status("default", name, running_status(self.view(pod), "10.0.0.1"))
        return pod

    @staticmethod
    def view(pod: Pod) -> Any:
        return sim_pod(pod, "nvidia.com/gpu")

    def write(self, pod: Pod, container: str, lines: list[str], time_ns: int = T0) -> None:
        meta = pod["metadata"]
        self.files.write("default", meta["name"], meta["uid"], container, lines=lines, time_ns=time_ns)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with SimApiServer(log_dir=tmp_path / "pods") as api:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        kube = await SimKubeClient.from_kubeconfig(config)
        try:
            yield Cluster(api, kube, config, PodLogFiles(tmp_path / "pods"))
        finally:
            await kube.close()


async def logs(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    return await kubectl(cluster.config, "logs", *args)


async def test_kubectl_logs_prints_what_the_container_printed(cluster: Cluster) -> None:
    cluster.write(await cluster.pod("p"), "main", MAIN)
    assert await logs(cluster, "p") == (0, "\n".join(MAIN) + "\n", "")


async def test_tail_timestamps_and_limit_bytes(cluster: Cluster) -> None:
    pod = await cluster.pod("p")
    cluster.write(pod, "main", MAIN[:1], T0)
    cluster.write(pod, "main", MAIN[1:], T0 + 250_000_000)
    assert await logs(cluster, "p", "--tail=1") == (0, MAIN[1] + "\n", "")
    code, out, _ = await logs(cluster, "p", "--timestamps")
    assert (code, out) == (0, f"2020-01-01T00:00:00.000000000Z {MAIN[0]}\n"
                              f"2020-01-01T00:00:00.250000000Z {MAIN[1]}\n")
    assert await logs(cluster, "p", "--limit-bytes=7") == (0, "Started", "")
    assert await logs(cluster, "p", "--since=1h") == (0, "", "")  # both lines are from 2020


async def test_c_picks_the_container_and_kubectl_defaults_to_the_first(cluster: Cluster) -> None:
    pod = await cluster.pod("p", "main", "side")
    cluster.write(pod, "main", ["from main"])
    cluster.write(pod, "side", ["from side"])
    assert await logs(cluster, "p", "-c", "side") == (0, "from side\n", "")
    code, out, err = await logs(cluster, "p")
    assert (code, out) == (0, "from main\n") and 'Defaulted container "main" out of: main, side' in err


async def test_an_unknown_container_is_refused_by_kubectl_and_by_the_server(cluster: Cluster) -> None:
    await cluster.pod("p")
    code, _, err = await logs(cluster, "p", "-c", "x")
    assert code == 1 and "container x is not valid for pod p" in err
    code, _, err = await kubectl(cluster.config, "get", "--raw", LOG_URL + "?container=x")
    assert code == 1 and "Error from server (BadRequest): container x is not valid for pod p" in err


async def test_a_pod_not_started_is_waiting_and_an_unscheduled_one_has_an_empty_log(cluster: Cluster) -> None:
    await cluster.pod("bound", running=False)
    code, _, err = await logs(cluster, "bound")
    assert code == 1
    assert err.strip() == ('Error from server (BadRequest): container "main" in pod "bound" is waiting to '
                           "start: ContainerCreating")
    await cluster.pod("unscheduled", node=None, running=False)
    assert await logs(cluster, "unscheduled") == (0, "", "")


async def test_an_invalid_tail_is_a_422_kubectl_prints_with_its_cause(cluster: Cluster) -> None:
    await cluster.pod("p")
    code, _, err = await kubectl(cluster.config, "get", "--raw", LOG_URL + "?tailLines=-2")
    assert code == 1
    assert ('The PodLogOptions "p" is invalid: tailLines: Invalid value: -2: must be greater than or equal '
            "to 0") in err


async def test_follow_streams_new_lines_and_ends_when_the_container_ends(cluster: Cluster) -> None:
    pod = await cluster.pod("p")
    cluster.write(pod, "main", MAIN)
    proc = await spawn_kubectl(cluster.config, "logs", "-f", "p")
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            seen = [(await proc.stdout.readline()).decode().rstrip("\n") for _ in MAIN]
            assert seen == MAIN  # streaming: what was there, sent before the container ends
            cluster.write(pod, "main", [pod_logs.exit_line("main")])  # the kubelet: last line, then status
            await cluster.kube.patch_pod_status("default", "p", succeeded_status(cluster.view(pod)))
            rest, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert (proc.returncode, rest.decode(), err) == (0, pod_logs.exit_line("main") + "\n", b"")


async def test_follow_of_a_finished_container_returns_its_log_at_once(cluster: Cluster) -> None:
    pod = await cluster.pod("p")
    cluster.write(pod, "main", [*MAIN, pod_logs.exit_line("main")])
    await cluster.kube.patch_pod_status("default", "p", succeeded_status(cluster.view(pod)))
    code, out, _ = await logs(cluster, "p", "-f")
    assert (code, out.splitlines()) == (0, [*MAIN, pod_logs.exit_line("main")])


async def test_discovery_lists_the_log_subresource(cluster: Cluster) -> None:
    code, out, err = await kubectl(cluster.config, "get", "--raw", "/api/v1")
    assert code == 0, err
    entry = next(r for r in json.loads(out)["resources"] if r["name"] == "pods/log")
    assert (entry["kind"], entry["verbs"], entry["namespaced"]) == ("Pod", ["get"], True)


async def test_a_server_without_a_log_directory_says_it_keeps_no_logs(tmp_path: Path) -> None:
    async with SimApiServer() as api:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        kube = await SimKubeClient.from_kubeconfig(config)
        try:
            pod = await kube.create_pod("default", cast(Pod, {"metadata": {"name": "p"},
                                                               "spec": {"containers": [{"name": "main",
                                                                                        "image": "cuda"}]}}))
            await kube.bind_pod("default", "p", pod["metadata"]["uid"], "node-1", {})
            running = running_status(sim_pod(pod, "nvidia.com/gpu"), "10.0.0.1")
            await kube.patch_pod_status("default", "p", running)
        finally:
            await kube.close()
        code, _, err = await kubectl(config, "logs", "p")
    assert code == 1
    assert err.strip() == ("Error from server (NotFound): the log of container main of pod p is not kept: "
                           "this API server stand-in has no pod log directory (`gpubus up` gives it one)")
