"""Gangs (the Workload API's PodGroups, beta in v1.37) with gpubus's extender on the real control plane.

kube-apiserver with ``GenericWorkload`` and ``scheduling.k8s.io/v1beta1``; the chart's
kube-scheduler with ``GenericWorkload``: a PodGroup with ``gang.minCount`` is placed in one pod-group
scheduling cycle, each member through gpubus's /filter, and is bound only when every member found a
node. One node of six A100-80GB cards; each member asks a whole card's memory, so only gpubus sees
that a member does not fit (kube-scheduler counts 60 ``nvidia.com/gpu`` slots).

Cases: a gang of 4 with 3 free cards stays Pending whole and leaks no slice (the slices /filter
held for the members that did fit lapse: the scheduler's ledger holds only the blockers), and once
a fourth card frees all 4 start; two gangs of 4 on 6 free cards: one runs, the other waits whole,
nothing leaked, and it starts once the first goes.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from asyncwait import wait_until
from e2e_harness import gpu_pod
from kube_harness import KubeE2E, kubectl, running_kube_stack

pytestmark = pytest.mark.timeout(900)

CARD_MIB = 81920


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def kube(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KubeE2E]:
    async with running_kube_stack(tmp_path_factory.mktemp("kube"), nodes=1, devices="6xA100-80GB",
                                  feature_gates="GenericWorkload=true",
                                  runtime_config="scheduling.k8s.io/v1beta1=true") as handle:
        yield handle


def _ok(done: Any) -> str:
    assert done.returncode == 0, f"kubectl {done.args[3:]}: {done.stderr[-2000:]}"
    return str(done.stdout)


def _whole_card(name: str, group: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = gpu_pod(name, mem=CARD_MIB, cores=10)
    pod["metadata"]["labels"] = {"test": "gang"}
    if group:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def _group(name: str, min_count: int) -> str:
    return yaml.safe_dump({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                           "metadata": {"name": name, "namespace": "default"},
                           "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}})


async def _ledger_entries(kube: KubeE2E) -> float:
    """gpubus_scheduler_ledger_entries of the scheduler (reservations /filter holds included)."""
    async with aiohttp.ClientSession() as session:
        port = kube.stack.ports.schedulers[0]
        async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            text = await resp.text()
    found = re.search(r"^gpubus_scheduler_ledger_entries (\S+)$", text, re.M)
    assert found, text[:500]
    return float(found[1])


async def _holds_only(kube: KubeE2E, count: int) -> None:
    async def settled() -> bool:
        return await _ledger_entries(kube) == count
    await wait_until(settled, 60, what=f"the scheduler's ledger down to {count} entries")


def _bound(kube: KubeE2E, names: list[str]) -> list[str]:
    return [n for n in names if (kube.pods.get(n) or {}).get("spec", {}).get("nodeName")]


async def test_a_gang_short_of_one_card_waits_whole_then_starts(kube: KubeE2E) -> None:
    blockers = [f"blocker-{i}" for i in range(3)]
    await kube.create(*(_whole_card(n) for n in blockers))
    await kube.wait_phase(blockers, {"Running"}, timeout=120)
    _ok(kubectl(kube.stack, "apply", "-f", "-", input_text=_group("four", 4)))
    members = [f"four-{i}" for i in range(4)]
    await kube.create(*(_whole_card(n, "four") for n in members))
    for name in members:
        await kube.wait_unschedulable(name, timeout=120)
    await _holds_only(kube, len(blockers))  # the members that fitted hold nothing once refused
    assert not _bound(kube, members)

    _ok(kubectl(kube.stack, "delete", "pod", blockers[0], "--wait=true", "--timeout=60s"))
    await kube.wait_phase(members, {"Running"}, timeout=240)
    await kube.check_invariants()
    _ok(kubectl(kube.stack, "delete", "pod", "-l", "test=gang", "--wait=true", "--timeout=120s"))
    _ok(kubectl(kube.stack, "delete", "podgroup", "four"))


async def test_two_gangs_on_too_few_cards_one_runs_the_other_waits_whole(kube: KubeE2E) -> None:
    groups = {"red": [f"red-{i}" for i in range(4)], "blue": [f"blue-{i}" for i in range(4)]}
    for group in groups:
        _ok(kubectl(kube.stack, "apply", "-f", "-", input_text=_group(group, 4)))
    await kube.create(*(_whole_card(n, g) for g, names in groups.items() for n in names))

    def one_runs() -> bool:
        running = [g for g, names in groups.items() if all(kube.phase(n) == "Running" for n in names)]
        return len(running) == 1
    await wait_until(one_runs, 240, what="one gang Running")
    winner = next(g for g, names in groups.items() if all(kube.phase(n) == "Running" for n in names))
    loser = next(g for g in groups if g != winner)
    for name in groups[loser]:
        await kube.wait_unschedulable(name, timeout=120)
    await _holds_only(kube, 4)
    assert not _bound(kube, groups[loser])

    _ok(kubectl(kube.stack, "delete", "pod", *groups[winner], "--wait=true", "--timeout=120s"))
    await kube.wait_phase(groups[loser], {"Running"}, timeout=240)
    await kube.check_invariants()
    _ok(kubectl(kube.stack, "delete", "pod", "-l", "test=gang", "--wait=true", "--timeout=120s"))
