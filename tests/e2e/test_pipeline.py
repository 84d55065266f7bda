"""The whole pipeline on one shared stack (3 nodes x 2 A100-80GB): webhook -> filter -> prioritize ->
bind -> GetPreferredAllocation -> Allocate -> Running -> usage -> Succeeded -> released.

Each test creates its own pods, ends with the invariant check over everything the stack has
seen, and deletes its pods so the next test starts with free GPUs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod, running_stack
from prometheus_client.parser import text_string_to_metric_families

from gpubus_local.stack import NODES_ENV
from gpubus_local.stack_scratch import host_scratch_root
from gpubus_local.stack_scratch import hosts_dir as hosts_dir_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def e2e(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[E2E]:
    async with running_stack(Path(tmp_path_factory.mktemp("stack"))) as handle:
        yield handle


async def _cleanup(e2e: E2E, names: list[str]) -> None:
    for name in names:
        await e2e.kube.delete_pod("default", name)
    await wait_until(lambda: not any(n in e2e.pods for n in names), 30, what="pods deleted")


async def test_shared_pods_run_with_exactly_the_limits_they_asked_for(e2e: E2E) -> None:
    names = [f"shared-{i}" for i in range(12)]
    await e2e.create(*(gpu_pod(n, mem=3000, cores=15) for n in names))
    await e2e.wait_phase(names, {"Running"})
    await e2e.check_invariants()
    await _cleanup(e2e, names)


async def test_finished_pods_release_their_slices(e2e: E2E) -> None:
    names = [f"short-{i}" for i in range(8)]
    await e2e.create(*(gpu_pod(n, mem=4000, cores=20, duration="1s") for n in names))
    await e2e.wait_phase(names, {"Succeeded"})
    await e2e.check_invariants()
    events = await e2e.tap_replay()
    uids = {e2e.pods[n]["metadata"]["uid"] for n in names}
    released = {e["pod_uid"] for e in events if e["kind"] == "allocation.released"}
    assert uids <= released
    await _cleanup(e2e, names)


async def test_one_pod_passes_every_stage_in_order(e2e: E2E) -> None:
    await e2e.create(gpu_pod("staged", mem=1000, cores=5, duration="3s"))
    await e2e.wait_phase(["staged"], {"Succeeded"})
    uid = e2e.pods["staged"]["metadata"]["uid"]

    async def stages() -> list[str]:
        seen: list[str] = []
        for e in await e2e.tap_replay():
            mine = (e.get("name") == "staged" or e.get("pod_uid") == uid
                    or (e.get("allocation") or {}).get("pod_uid") == uid
                    or any(c.get("pod_uid") == uid for c in e.get("containers") or []))
            if mine and e["kind"] not in seen:
                seen.append(e["kind"])
        return seen

    # the monitor may sample the running container before the node-agent's verdict, which goes out
    # through its outbox after Allocate (CI saw usage.sample stored 6 ms ahead of allocation.applied)
    want = [{"pod.admitted"}, {"allocation.decided"}, {"allocation.applied", "usage.sample"},
            {"allocation.released"}]
    await wait_until(lambda: _ordered(stages(), want), 20, what=f"stages {want}")
    await e2e.check_invariants()
    await _cleanup(e2e, ["staged"])


async def _ordered(seen_coro: object, want: list[set[str]]) -> bool:
    """Each group's kinds all seen, every one after every kind of the groups before it."""
    seen = await seen_coro  # type: ignore[misc]
    groups = [next(i for i, group in enumerate(want) if kind in group) for kind in seen
              if any(kind in group for group in want)]
    return groups == sorted(groups) and len(groups) == sum(len(group) for group in want)


async def test_percentage_exclusive_and_multi_gpu_pods_get_their_slices(e2e: E2E) -> None:
    pods = [gpu_pod("half-0", mem=None, pct=50, cores=30), gpu_pod("half-1", mem=None, pct=50, cores=30),
            gpu_pod("exclusive", mem=None, cores=100), gpu_pod("two-cards", mem=8000, cores=25, gpus=2),
            gpu_pod("with-init", mem=2000, cores=10, init=True)]
    names = [p["metadata"]["name"] for p in pods]
    await e2e.create(*pods)
    await e2e.wait_phase(names, {"Running"})
    admissions = e2e.admissions()
    two = admissions[e2e.pods["two-cards"]["metadata"]["uid"]]["containers"]["main"]
    assert len(set(two["envs"]["NVIDIA_VISIBLE_DEVICES"].split(","))) == 2
    await e2e.check_invariants()
    await _cleanup(e2e, names)


async def test_a_pod_that_cannot_fit_stays_pending_with_a_published_reason(e2e: E2E) -> None:
    await e2e.create(gpu_pod("too-big", mem=200_000, cores=10),
                     gpu_pod("wrong-type", annotations={"nvidia.com/use-gputype": "H100"}),
                     gpu_pod("right-type", annotations={"nvidia.com/use-gputype": "A100"}))
    await e2e.wait_unschedulable("too-big")
    await e2e.wait_unschedulable("wrong-type")
    await e2e.wait_phase(["right-type"], {"Running"})
    assert e2e.phase("too-big") == "Pending"
    # what `kubectl describe pod` shows: kube-scheduler's events with the extender's reasons, the kubelet's
    refused = await e2e.wait_event("too-big", "FailedScheduling")
    assert refused["type"] == "Warning" and refused["source"] == {"component": "gpubus-scheduler"}
    assert refused["message"].startswith("0/3 nodes are available: ")
    assert "CardInsufficientMemory" in refused["message"]
    node = e2e.pods["right-type"]["spec"]["nodeName"]
    scheduled = await e2e.wait_event("right-type", "Scheduled")
    assert scheduled["message"] == f"Successfully assigned default/right-type to {node}"
    started = await e2e.wait_event("right-type", "Started")
    assert started["source"] == {"component": "kubelet", "host": node}
    assert started["involvedObject"]["fieldPath"] == "spec.containers{main}"
    await e2e.check_invariants()
    await _cleanup(e2e, ["too-big", "wrong-type", "right-type"])


async def _prioritize_calls(e2e: E2E) -> float:
    assert e2e.stack.ports is not None
    url = f"http://127.0.0.1:{e2e.stack.ports.scheduler}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    counts = [sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples if sample.name == "gpubus_scheduler_prioritize_seconds_count"]
    assert counts, "the scheduler exports no prioritize histogram"
    return counts[0]


async def test_hami_single_node_mode_runs_the_pipeline_without_prioritize(tmp_path: Path) -> None:
    hami_mode = functools.partial(dataclasses.replace, single_node_filter=True)
    async with running_stack(tmp_path / "hami", configure=hami_mode) as hami:
        names = [f"hami-{i}" for i in range(10)]
        await hami.create(*(gpu_pod(n, mem=3000, cores=15, duration="1s") for n in names))
        await hami.wait_phase(names, {"Succeeded"})
        await hami.check_invariants()
        assert await _prioritize_calls(hami) == 0


async def test_node_agents_in_a_process_of_their_own_serve_the_kubelets_of_the_other(tmp_path: Path) -> None:
    """``agents_apart`` (bench/e2e.py measures the node-agents' CPU so): the agents' process serves
    the device plugin sockets, the hosts' process the kubelets', and pods run as before."""
    apart = functools.partial(dataclasses.replace, agents_apart=True)
    async with running_stack(tmp_path / "apart", nodes=2, configure=apart) as split:
        names = [f"apart-{i}" for i in range(6)]
        await split.create(*(gpu_pod(n, mem=3000, cores=15, duration="1s") for n in names))
        await split.wait_phase(names, {"Succeeded"})
        await split.check_invariants()
        agents, hosts = (split.stack.children[n].pid or 0 for n in ("agents", "nodes"))
        hosts_dir = hosts_dir_of(tmp_path / "apart")
        plugin = {p for p in _unix_socket_paths(agents) if p.startswith(str(hosts_dir))}
        kubelet = {p for p in _unix_socket_paths(hosts) if p.startswith(str(hosts_dir))}
        assert {Path(p).name for p in plugin} == {"nvidia-gpu.sock"}, plugin
        assert "kubelet.sock" in {Path(p).name for p in kubelet}, kubelet
        assert _environ(agents)["GRPC_EXPERIMENTS"] == os.environ.get("GRPC_EXPERIMENTS",
                                                                      NODES_ENV["GRPC_EXPERIMENTS"])
    assert not hosts_dir.exists()


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _unix_socket_paths(pid: int) -> set[str]:
    """Paths of the unix sockets the process holds open (its fds' inodes in /proc/net/unix)."""
    links = (os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
    inodes = {link[len("socket:["):-1] for link in links if link.startswith("socket:[")}
    rows = (line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:])
    return {row[7] for row in rows if len(row) >= 8 and row[6] in inodes}


async def test_the_nodes_process_runs_with_its_defaults_and_memory_scratch(e2e: E2E) -> None:
    pid = e2e.stack.children["nodes"].pid
    assert pid is not None
    environ = _environ(pid)
    for name, value in NODES_ENV.items():
        assert environ[name] == os.environ.get(name, value)
    assert "GRPC_EXPERIMENTS" not in _environ(e2e.stack.children["scheduler"].pid or 0)
    sockets = {p for p in _unix_socket_paths(pid) if p.endswith(".sock")}
    assert sockets, "the simulated kubelets and plugins serve no unix socket"
    assert all(p.startswith(f"{host_scratch_root()}/gpubus-") for p in sockets), sockets
