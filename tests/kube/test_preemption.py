"""Preemption of shared GPUs on the real Kubernetes v1.37 control plane, one stack for the module.

One node with two A100-80GB cards (81920 MiB each), filled by eight pods of 20000 MiB (four a
card, 1920 MiB left on each): a pod of 40000 MiB fits nowhere only for card memory, which
kube-scheduler's own preemption cannot see. The gpubus scheduler (leader) evicts through the
Eviction API exactly two pods of lower priority, both on one card, and the pod starts on that
card; a PodDisruptionBudget makes it pick the other card's pods, or wait while every candidate is
protected; equal priority and ``preemptionPolicy: Never`` never preempt.
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

from shared.annotations import DEVICES_ALLOCATED
from shared.events import PodPreempted

pytestmark = pytest.mark.timeout(900)

CLASSES = [
    {"name": "gpubus-low", "value": 100},
    {"name": "gpubus-high", "value": 1000},
    {"name": "gpubus-higher-never", "value": 2000, "preemptionPolicy": "Never"},
]
FILL_MIB, BIG_MIB = 20000, 40000


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def kube(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KubeE2E]:
    # The room is held longer than any test here waits for its pod (180 s): on a loaded machine
    # kube-scheduler may retry the pod late, and a hold that lapsed first would plan again and
    # evict a second set of victims, which is the hold's rule, not the case under test.
    async with running_kube_stack(tmp_path_factory.mktemp("kube"), nodes=1, devices="2xA100-80GB",
                                  scheduler_args=("--preemption-hold", "300")) as handle:
        docs = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": c["name"]}, "value": c["value"],
                 **({"preemptionPolicy": c["preemptionPolicy"]} if "preemptionPolicy" in c else {})}
                for c in CLASSES]
        _ok(kubectl(handle.stack, "apply", "-f", "-", input_text=yaml.safe_dump_all(docs)))
        yield handle


def _ok(done: Any) -> str:
    assert done.returncode == 0, f"kubectl {done.args[3:]}: {done.stderr[-2000:]}"
    return str(done.stdout)


def _pod(name: str, mem: int, priority_class: str, group: str) -> dict[str, Any]:
    pod: dict[str, Any] = gpu_pod(name, mem=mem, cores=10)
    pod["metadata"]["labels"] = {"test": group}
    pod["spec"]["priorityClassName"] = priority_class
    pod["spec"]["terminationGracePeriodSeconds"] = 5
    return pod


def _annotated(kube: KubeE2E, name: str) -> bool:
    return DEVICES_ALLOCATED in (kube.pods[name]["metadata"].get("annotations") or {})


def _card(kube: KubeE2E, name: str) -> str:
    """The card UUID the pod's HAMi allocation annotation names (one card a pod here)."""
    value = kube.pods[name]["metadata"].get("annotations", {}).get(DEVICES_ALLOCATED, "")
    cards = set(re.findall(r"GPU-[0-9A-Za-z-]+?(?=,)", str(value)))
    assert len(cards) == 1, (name, value)
    return str(cards.pop())


async def _fill(kube: KubeE2E, group: str, priority_class: str) -> dict[str, str]:
    """Eight pods of 20000 MiB, four a card; returns pod name -> card."""
    names = [f"{group}-{i}" for i in range(8)]
    await kube.create(*(_pod(n, FILL_MIB, priority_class, group) for n in names))
    await kube.wait_phase(names, {"Running"}, timeout=120)
    await wait_until(lambda: all(_annotated(kube, n) for n in names), 30, what="allocations annotated")
    cards = {n: _card(kube, n) for n in names}
    assert sorted(list(cards.values()).count(c) for c in set(cards.values())) == [4, 4], cards
    return cards


async def _clear(kube: KubeE2E, group: str) -> None:
    _ok(kubectl(kube.stack, "delete", "pod", "-l", f"test={group}", "--wait=true", "--timeout=120s"))
    await kube.check_invariants()


async def _preempted(kube: KubeE2E) -> list[dict[str, Any]]:
    """Every ``pod.preempted`` on the stream so far, as ``gpubus tap --json`` prints it."""
    return [e for e in await kube.tap_replay() if e.get("kind") == PodPreempted.KIND]


async def _outcomes(kube: KubeE2E) -> dict[str, float]:
    """gpubus_scheduler_preemptions_total by outcome, summed over the scheduler replicas."""
    total: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        for port in kube.stack.ports.schedulers:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                text = await resp.text()
            for line in text.splitlines():
                m = re.match(r'gpubus_scheduler_preemptions_total\{outcome="(\w+)"\} (\S+)', line)
                if m:
                    total[m[1]] = total.get(m[1], 0.0) + float(m[2])
    return total


async def _outcome_after(kube: KubeE2E, outcome: str, before: dict[str, float]) -> None:
    async def seen() -> bool:
        return (await _outcomes(kube)).get(outcome, 0.0) > before.get(outcome, 0.0)
    await wait_until(seen, 90, what=f"a preemption attempt ending {outcome}")


async def test_higher_priority_pod_evicts_exactly_what_it_needs_on_one_card(kube: KubeE2E) -> None:
    cards = await _fill(kube, "low", "gpubus-low")
    await kube.create(_pod("urgent", BIG_MIB, "gpubus-high", "low"))
    await kube.wait_phase(["urgent"], {"Running"}, timeout=180)
    await wait_until(lambda: _annotated(kube, "urgent"), 30, what="urgent's allocation annotated")
    card = _card(kube, "urgent")
    gone = sorted(n for n in cards if n not in kube.pods or kube.pods[n]["metadata"].get("deletionTimestamp"))
    assert len(gone) == 2, gone
    assert {cards[n] for n in gone} == {card}, (gone, cards, card)
    assert all(kube.phase(n) == "Running" for n in cards if n not in gone)
    events = [e for e in await _preempted(kube) if e["beneficiary_name"] == "urgent"]
    assert sorted(e["name"] for e in events) == gone, events
    assert all(e["card"] == card and e["priority"] == 100 and e["beneficiary_priority"] == 1000
               for e in events), events
    for victim in gone:
        event = await kube.wait_event(victim, "Preempted", timeout=30)
        assert "urgent" in event["message"], event
    event = await kube.wait_event("urgent", "Preempting", timeout=30)
    assert all(v in event["message"] for v in gone), event
    await _clear(kube, "low")


def _pdb(name: str, protected: int) -> str:
    """A budget that lets none of the ``protected`` pods go (bare pods: minAvailable, a count)."""
    return yaml.safe_dump({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": "default"},
                           "spec": {"minAvailable": protected,
                                    "selector": {"matchLabels": {"protected": "yes"}}}})


async def _pdb_settled(kube: KubeE2E, name: str, protected: int) -> None:
    assert kube.stack.api is not None
    api = kube.stack.api

    async def settled() -> bool:
        pdb = await api.get(f"/apis/policy/v1/namespaces/default/poddisruptionbudgets/{name}")
        if pdb is None:
            return False
        status = pdb.get("status") or {}
        return (status.get("observedGeneration") == pdb["metadata"]["generation"]
                and status.get("expectedPods") == protected and status.get("disruptionsAllowed") == 0)
    await wait_until(settled, 60, what=f"the budget covering {protected} pods observed")


async def test_a_budget_makes_it_pick_other_victims_or_wait(kube: KubeE2E) -> None:
    cards = await _fill(kube, "pdb", "gpubus-low")
    shielded_card = cards["pdb-0"]
    shielded = [n for n, c in cards.items() if c == shielded_card]
    _ok(kubectl(kube.stack, "label", "pod", *shielded, "protected=yes"))
    _ok(kubectl(kube.stack, "apply", "-f", "-", input_text=_pdb("shield", len(shielded))))
    await _pdb_settled(kube, "shield", len(shielded))

    await kube.create(_pod("pdb-urgent", BIG_MIB, "gpubus-high", "pdb"))
    await kube.wait_phase(["pdb-urgent"], {"Running"}, timeout=180)
    await wait_until(lambda: _annotated(kube, "pdb-urgent"), 30, what="pdb-urgent's allocation annotated")
    other_card = _card(kube, "pdb-urgent")
    assert other_card != shielded_card
    gone = sorted(n for n in cards if n not in kube.pods or kube.pods[n]["metadata"].get("deletionTimestamp"))
    assert len(gone) == 2 and all(cards[n] == other_card for n in gone), (gone, cards)
    assert all(kube.phase(n) == "Running" for n in shielded)

    # now every pod of lower priority is protected: the next one waits, evicting nobody
    left = [n for n, c in cards.items() if c == other_card and n not in gone]
    _ok(kubectl(kube.stack, "label", "pod", *left, "protected=yes"))
    _ok(kubectl(kube.stack, "apply", "-f", "-", input_text=_pdb("shield", len(shielded) + len(left))))
    await _pdb_settled(kube, "shield", len(shielded) + len(left))
    before = await _outcomes(kube)
    await kube.create(_pod("pdb-waits", BIG_MIB, "gpubus-high", "pdb"))
    await _outcome_after(kube, "no_plan", before)
    assert kube.phase("pdb-waits") == "Pending"
    assert all(kube.phase(n) == "Running" and not kube.pods[n]["metadata"].get("deletionTimestamp")
               for n in shielded + left)

    # the budget goes: the waiting pod's next retry makes room on one card
    _ok(kubectl(kube.stack, "delete", "pdb", "shield"))
    _ok(kubectl(kube.stack, "annotate", "pod", "pdb-waits", "--overwrite", "gpubus.io/test-retry=1"))
    await kube.wait_phase(["pdb-waits"], {"Running"}, timeout=180)
    await _clear(kube, "pdb")


async def test_equal_priority_and_policy_never_preempt_no_one(kube: KubeE2E) -> None:
    cards = await _fill(kube, "peer", "gpubus-high")
    before = await _outcomes(kube)
    await kube.create(_pod("peer-equal", BIG_MIB, "gpubus-high", "peer"))
    await _outcome_after(kube, "no_plan", before)
    before = await _outcomes(kube)
    await kube.create(_pod("peer-never", BIG_MIB, "gpubus-higher-never", "peer"))
    await _outcome_after(kube, "never", before)
    assert kube.phase("peer-equal") == "Pending" and kube.phase("peer-never") == "Pending"
    assert all(kube.phase(n) == "Running" and not kube.pods[n]["metadata"].get("deletionTimestamp")
               for n in cards)
    assert not [e for e in await _preempted(kube) if e["beneficiary_name"].startswith("peer-")]
    await _clear(kube, "peer")



@pytest.mark.parametrize(("verb", "resource", "allowed"), [
    ("create", "pods --subresource=eviction", True),
    ("patch", "pods --subresource=status", True),
    ("create", "events", True),
    ("update", "poddisruptionbudgets.policy", False),
    ("delete", "nodes", False),
])
async def test_the_scheduler_account_may_evict_and_nominate(kube: KubeE2E, verb: str, resource: str,
                                                            allowed: bool) -> None:
    """What preemption needs is what the chart grants (the evictions above ran with this token);
    budgets stay out of its reach."""
    config = await kube.stack.service_kubeconfig("scheduler")
    done = kubectl(kube.stack, "auth", "can-i", verb, *resource.split(), "--namespace", "default",
                   kubeconfig=config)
    assert done.stdout.strip() == ("yes" if allowed else "no"), (done.stdout, done.stderr)
