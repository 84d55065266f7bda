"""Flexible MIG through ``gpubus up``: webhook -> filter -> bind -> Allocate creates the instance.

On one node with two A100-80GB cards in MIG mode (``--devices 2xA100-80GB:mig``), as in HAMi
v2.10's validation checklist (``docs/develop/dynamic-mig-migration.md``): a pod with
``nvidia.com/vgpu-mode: mig`` runs with its MIG UUID in its container log and the reservation in
``hami.io/vgpu-mig-allocations``; one container gets several instances; a request no profile
holds stays Pending with ``CardMigTopologyInfeasible``; a deleted pod's slices are reused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod, running_stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MIG = {"nvidia.com/vgpu-mode": "mig"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def e2e(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[E2E]:
    data = Path(tmp_path_factory.mktemp("mig"))
    async with running_stack(data, nodes=1, devices="2xA100-80GB:mig") as handle:
        yield handle


def reservations(e2e: E2E, name: str) -> list[dict[str, object]]:
    annotations = e2e.pods[name]["metadata"].get("annotations") or {}
    return list(json.loads(annotations["hami.io/vgpu-mig-allocations"]))


def container_log(e2e: E2E, name: str) -> str:
    pod = e2e.pods[name]
    path = e2e.stack.pod_logs / f"default_{name}_{pod['metadata']['uid']}" / "main" / "0.log"
    return path.read_text() if path.exists() else ""


async def test_a_mig_pod_runs_with_its_mig_uuid_in_its_log(e2e: E2E) -> None:
    await e2e.create(gpu_pod("mig-one", mem=8000, cores=None, annotations=MIG))
    await e2e.wait_phase(["mig-one"], {"Running"})
    uid = e2e.pods["mig-one"]["metadata"]["uid"]
    envs = e2e.admissions()[uid]["containers"]["main"]["envs"]
    assert set(envs) == {"NVIDIA_VISIBLE_DEVICES"}
    mig_uuid = envs["NVIDIA_VISIBLE_DEVICES"]
    assert mig_uuid.startswith("MIG-")
    await wait_until(lambda: f"(UUID: {mig_uuid})" in container_log(e2e, "mig-one"), 30, what="its log")
    (held,) = reservations(e2e, "mig-one")
    assert (held["profile"], held["placement"]) == ("1g.10gb", {"start": 6, "size": 1})
    await e2e.check_invariants()


async def test_one_container_gets_several_instances_and_geometry_limits_the_rest(e2e: E2E) -> None:
    # one after the other: created together, either may be scheduled first, and mig-huge taking a
    # 3g first leaves mig-three Pending (CI saw it)
    await e2e.create(gpu_pod("mig-three", mem=30000, cores=None, gpus=3, annotations=MIG))
    await e2e.wait_phase(["mig-three"], {"Running"})
    await e2e.create(gpu_pod("mig-huge", mem=25000, cores=None, annotations=MIG))
    uid = e2e.pods["mig-three"]["metadata"]["uid"]
    visible = e2e.admissions()[uid]["containers"]["main"]["envs"]["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(set(visible)) == 3 and all(v.startswith("MIG-") for v in visible)
    assert sorted(r["profile"] for r in reservations(e2e, "mig-three")) == ["3g.40gb"] * 3
    # 1g@6 + 3g@0 on one card, 3g@4 + 3g@0 on the other: 25000 MiB needs a 3g, and no 3g slot is free
    refused = await e2e.wait_event("mig-huge", "FailedScheduling")
    assert refused["message"] == (
        "0/1 nodes are available: 1 1/2 CardInsufficientMemory, 1/2 CardMigTopologyInfeasible."
    )
    assert e2e.phase("mig-huge") == "Pending"
    await e2e.check_invariants()
    await e2e.kube.delete_pod("default", "mig-huge")
    await wait_until(lambda: "mig-huge" not in e2e.pods, 30, what="mig-huge deleted")


async def test_a_deleted_pods_slice_is_given_again(e2e: E2E) -> None:
    first = reservations(e2e, "mig-one")[0]
    await e2e.kube.delete_pod("default", "mig-one")
    await wait_until(lambda: "mig-one" not in e2e.pods, 30, what="mig-one deleted")
    await e2e.create(gpu_pod("mig-again", mem=8000, cores=None, annotations=MIG))
    await e2e.wait_phase(["mig-again"], {"Running"})
    again = reservations(e2e, "mig-again")[0]
    assert (again["gpuUUID"], again["placement"]) == (first["gpuUUID"], first["placement"])
    await e2e.check_invariants()


async def test_the_node_shows_its_gpu_memory_and_cores(e2e: E2E) -> None:
    """What ``kubectl describe node`` lists: two A100-80GB in mig mode, 81920 MiB and 100 cores each."""
    nodes, _ = await e2e.kube.list_nodes()
    (node,) = nodes

    async def published() -> bool:
        status = ((await e2e.kube.get_node(node["metadata"]["name"])) or {}).get("status") or {}
        want = {"nvidia.com/gpumem": "163840", "nvidia.com/gpucores": "200"}
        parts = [status.get("capacity") or {}, status.get("allocatable") or {}]
        return all(part.get(k) == v for part in parts for k, v in want.items())

    await wait_until(published, 30, what="GPU memory and cores in the Node's status")
