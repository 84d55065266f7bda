"""``kubectl logs`` on the whole stack: what a GPU container prints, written by the simulated kubelet
from what the node-agent's Allocate answered, read back by the API server stand-in.

Cases: the log of a running GPU pod names its node, its GPU (the UUID the kubelet received) with the
memory and SM limits the pod asked for, and HAMi-core preloaded; an init container's log ends with its
exit; ``kubectl logs -f`` ends when the pod Succeeds, with the exit line; a deleted pod's log directory
goes; a new stack starts without the logs a killed one left, and a stopped one leaves none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod, running_stack
from kubectl import kubectl, needs_kubectl

from gpubus_local.stack_scratch import pod_log_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), needs_kubectl]

STALE = "default_old_0000/main/0.log"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def e2e(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[E2E]:
    data = Path(tmp_path_factory.mktemp("logs"))
    stale = pod_log_dir(data) / STALE  # as a killed stack on this data dir would have left it
    stale.parent.mkdir(parents=True)
    stale.write_text("2025-01-01T00:00:00Z stdout F from an earlier run\n")
    async with running_stack(data, nodes=1, devices="2xA100-80GB") as handle:
        yield handle
    assert not pod_log_dir(data).exists(), "a stopped stack left its pods' logs behind"


async def test_a_running_gpu_pods_log_shows_the_slice_it_got(e2e: E2E) -> None:
    await e2e.create(gpu_pod("logs-shared", mem=3000, cores=30))
    await e2e.wait_phase(["logs-shared"], {"Running"})
    pod = e2e.pods["logs-shared"]
    node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    visible = e2e.admissions()[uid]["containers"]["main"]["envs"]["NVIDIA_VISIBLE_DEVICES"]
    code, out, err = await kubectl(e2e.stack.kubeconfig, "logs", "logs-shared")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (f"Started container main of pod default/logs-shared on node {node} "
                        "(simulated by gpubus)")
    assert lines[1] == f"GPU 0: A100-SXM4-80GB (UUID: {visible})  memory limit 3000 MiB  SM limit 30 %"
    assert lines[2].startswith("HAMi-core: ") and lines[2].endswith("preloaded through /etc/ld.so.preload")
    log_dir = e2e.stack.pod_logs / f"default_logs-shared_{uid}"
    assert (log_dir / "main" / "0.log").is_file()
    await e2e.kube.delete_pod("default", "logs-shared")
    await wait_until(lambda: not log_dir.exists(), 30, what="the deleted pod's log directory removed")
    await e2e.check_invariants()


async def test_an_init_containers_log_ends_with_its_exit(e2e: E2E) -> None:
    await e2e.create(gpu_pod("logs-init", init=True, mem=1000, cores=10))
    await e2e.wait_phase(["logs-init"], {"Running"})
    code, out, err = await kubectl(e2e.stack.kubeconfig, "logs", "logs-init", "-c", "warmup")
    assert code == 0, err
    assert "memory limit 1000 MiB  SM limit 10 %" in out
    assert out.splitlines()[-1] == "Container warmup exited with code 0 (Completed)"


async def test_follow_ends_when_the_pod_succeeds(e2e: E2E) -> None:
    await e2e.create(gpu_pod("logs-follow", mem=2000, cores=20, duration="5s"))
    await e2e.wait_phase(["logs-follow"], {"Running", "Succeeded"})
    code, out, err = await kubectl(e2e.stack.kubeconfig, "logs", "-f", "logs-follow", timeout_s=60)
    assert code == 0, err
    assert "memory limit 2000 MiB  SM limit 20 %" in out
    assert out.splitlines()[-1] == "Container main exited with code 0 (Completed)"
    await e2e.wait_phase(["logs-follow"], {"Succeeded"})
    await e2e.check_invariants()


async def test_a_new_stack_starts_without_an_earlier_runs_logs(e2e: E2E) -> None:
    assert e2e.stack.pod_logs == pod_log_dir(e2e.stack.data_dir) and e2e.stack.pod_logs.is_dir()
    assert not (e2e.stack.pod_logs / STALE).exists()
