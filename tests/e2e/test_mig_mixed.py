"""HAMi's documented pod through ``gpubus up`` on a node with a card in MIG mode beside shared ones.

The pod of HAMi's user guide (one container, ``nvidia.com/gpu: 2``, ``gpumem-percentage: 50``,
``gpucores: 30``) on ``2xA100-80GB+A100-80GB:mig``: the scan meets the MIG card first, and the
scheduler once gave the container its one 7g instance and a shared card, which the node-agent
refused at Allocate (the pod Failed). One rule now binds both (``shared/allocation_rules.py``):
the pod runs on the two shared cards with HAMi-core limits, a second one too (after the MIG card
has failed it alone), and a third stays Pending with each card's reason from the scan of its kind.
A MIG pod with a MIG init container runs: the two instances, both made at admission, never overlap
(they once got the same slice and the card refused the second).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from e2e_harness import E2E, gpu_pod, running_stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def e2e(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[E2E]:
    data = Path(tmp_path_factory.mktemp("mig-mixed"))
    async with running_stack(data, nodes=1, devices="2xA100-80GB+A100-80GB:mig") as handle:
        yield handle


def documented_pod(name: str) -> dict[str, object]:
    return gpu_pod(name, mem=None, pct=50, cores=30, gpus=2)


async def test_the_documented_pod_runs_on_shared_cards_and_never_mixes_kinds(e2e: E2E) -> None:
    for name in ("doc-1", "doc-2"):  # doc-2's scan meets the MIG card first: it fails alone
        await e2e.create(documented_pod(name))
        await e2e.wait_phase([name], {"Running"})
        uid = e2e.pods[name]["metadata"]["uid"]
        envs = e2e.admissions()[uid]["containers"]["main"]["envs"]
        visible = envs["NVIDIA_VISIBLE_DEVICES"].split(",")
        assert len(set(visible)) == 2 and all(v.startswith("GPU-") for v in visible)
        limits = [envs[f"CUDA_DEVICE_MEMORY_LIMIT_{k}"] for k in range(2)]
        assert limits == ["40960m", "40960m"]
        assert envs["CUDA_DEVICE_SM_LIMIT"] == "30"
        assert "hami.io/vgpu-mig-allocations" not in (e2e.pods[name]["metadata"].get("annotations") or {})
    await e2e.check_invariants()


async def test_a_third_stays_pending_with_each_cards_reason(e2e: E2E) -> None:
    await e2e.create(documented_pod("doc-3"))
    refused = await e2e.wait_event("doc-3", "FailedScheduling")
    # the MIG card holds one 7g instance (50 % is 40960 MiB, more than a 3g's 40192), not two;
    # the shared cards are full
    assert refused["message"] == (
        "0/1 nodes are available: 1 1/3 AllocatedCardsInsufficientRequest, 1/3 CardMigTopologyInfeasible,"
        " 2/3 CardInsufficientMemory."
    )
    assert e2e.phase("doc-3") == "Pending"
    await e2e.check_invariants()


async def test_a_mig_pod_with_a_mig_init_container_runs_on_two_instances(e2e: E2E) -> None:
    name = "mig-init"
    await e2e.create(
        gpu_pod(name, mem=8000, cores=None, init=True, annotations={"nvidia.com/vgpu-mode": "mig"})
    )
    await e2e.wait_phase([name], {"Running"})
    uid = e2e.pods[name]["metadata"]["uid"]
    containers = e2e.admissions()[uid]["containers"]
    seen = [containers[c]["envs"]["NVIDIA_VISIBLE_DEVICES"] for c in ("warmup", "main")]
    assert len(set(seen)) == 2 and all(v.startswith("MIG-") for v in seen)
    held = json.loads(e2e.pods[name]["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])
    assert sorted(r["placement"]["start"] for r in held) == [5, 6]
    await e2e.check_invariants()
