"""The invariants every end-to-end test ends with, as one reusable checker over recorded facts.

Facts: the event stream (replayed through ``gpubus tap --json --all``), the pods from the API
server, what each simulated kubelet received from Allocate, and the ``allocations``/``locks``
buckets. Violations are collected as sentences, so a failing test says everything that broke.

1. No device is ever over-committed: replaying inventory + allocation.decided/failed/released in
   stream order, per device the slots, MiB and cores handed out never exceed the device's.
2. Every pod is Running/Succeeded with exactly the limits it asked for (the Allocate envs match the
   decision and the decision matches the pod's resource limits; a pod on MIG instances sees one
   MIG UUID per card and no HAMi-core limits), or Pending with a published
   ``pod.unschedulable``, or (only where the test allows it) Failed.
3. The ledger equals the live GPU pods: KV ``allocations`` holds exactly the bound, unfinished pods
   that ask for GPU resources (a pod without any, placed by the default-scheduler, has no slice).
   The ledger is read between two reads of the pods, so a pod that finished (or was bound) between
   them may match either read, but only if the stream shows its release (or decision) last.
4. No key ``alloc.<node>.<n>`` is in ``locks``: the Allocate leases went with issue 32's fencing
   token, and anything that still writes one is a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpubus_local.stack_check import replay_overcommit
from shared.requests import parse_quantity

Pod = dict[str, Any]

_MEM, _PCT, _CORES, _COUNT = "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", \
    "nvidia.com/gpu"


def _limits(container: dict[str, Any]) -> dict[str, Any]:
    """The container's limits as integers: a real API server returns quantities canonical
    (``gpumem: 3000`` reads back as ``"3k"``)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return {name: parse_quantity(value) for name, value in limits.items() if name.startswith("nvidia.com/")}


def live_gpu_pod(pod: Pod) -> bool:
    """Bound, unfinished and asking for an ``nvidia.com/`` resource: what the ledger must hold."""
    spec = pod.get("spec") or {}
    if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    return any(name.startswith("nvidia.com/") for c in containers
               for name in (*_limits(c), *((c.get("resources") or {}).get("requests") or {})))


def _expected_envs(pod: Pod, record: dict[str, Any], devmem: dict[str, int]) -> list[str]:
    """Invariant 2 for one started pod: envs == decision == request."""
    problems: list[str] = []
    name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    spec = pod.get("spec") or {}
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    for c in containers:
        limits = _limits(c)
        if _COUNT not in limits:
            continue
        got = record["containers"].get(c["name"])
        if got is None:
            problems.append(f"{name}/{c['name']}: the kubelet never got an Allocate answer")
            continue
        envs, ids = got["envs"], got["device_ids"]
        # None: not reported (the real kubelet's pod-resources API leaves init containers out)
        if ids is not None and len(ids) != int(limits[_COUNT]):
            problems.append(f"{name}/{c['name']}: asked {limits[_COUNT]} GPUs, kubelet assigned {len(ids)}")
        uuids = envs.get("NVIDIA_VISIBLE_DEVICES", "").split(",")
        if all(u.startswith("MIG-") for u in uuids):
            # MIG isolates in hardware: one instance per card asked, and no HAMi-core limits
            if len(set(uuids)) != int(limits[_COUNT]) or any(k.startswith("CUDA_") for k in envs):
                problems.append(f"{name}/{c['name']}: MIG answer {envs} for {limits[_COUNT]} GPUs")
            continue
        for i, uuid in enumerate(uuids):
            want = None
            if _MEM in limits:
                want = int(limits[_MEM])
            elif _PCT in limits and uuid in devmem:
                want = devmem[uuid] * int(limits[_PCT]) // 100
            elif uuid in devmem:
                want = devmem[uuid]  # no memory asked: the whole card
            have = envs.get(f"CUDA_DEVICE_MEMORY_LIMIT_{i}")
            if want is not None and have != f"{want}m":
                problems.append(f"{name}/{c['name']}: CUDA_DEVICE_MEMORY_LIMIT_{i}={have}, asked {want}m")
        cores = int(limits.get(_CORES, 0))
        sm = envs.get("CUDA_DEVICE_SM_LIMIT")
        if cores and sm != str(cores):
            problems.append(f"{name}/{c['name']}: CUDA_DEVICE_SM_LIMIT={sm}, asked {cores}")
    return problems


@dataclass(slots=True)
class Facts:
    events: list[dict[str, Any]]
    pods: list[Pod]
    admissions: dict[str, dict[str, Any]]
    """pod uid -> what its kubelet got from Allocate (last admission)."""
    ledger: set[str]
    """Keys of KV ``allocations``."""
    locks: set[str]
    """Keys of KV ``locks``."""
    pods_after: list[Pod] | None = None
    """The pods read again right after the ledger (None: not re-read, ``pods`` must match alone)."""


def _last_allocation_events(events: list[dict[str, Any]]) -> dict[str, str]:
    """pod uid -> kind of its last ``allocation.decided``/``allocation.released`` in stream order."""
    last: dict[str, str] = {}
    for e in events:
        kind = e.get("kind")
        if kind == "allocation.decided":
            last[e["allocation"]["pod_uid"]] = kind
        elif kind == "allocation.released" and e.get("pod_uid"):
            last[e["pod_uid"]] = kind
    return last


def _live_uids(pods: list[Pod]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods if live_gpu_pod(p)}


def changes_unseen(facts: Facts) -> set[str]:
    """Pods that finished or were bound between the two pod reads, but whose release or decision
    is not (yet) the stream's last word on them."""
    if facts.pods_after is None:
        return set()
    before, after = _live_uids(facts.pods), _live_uids(facts.pods_after)
    last = _last_allocation_events(facts.events)
    return {u for u in before - after if last.get(u) != "allocation.released"} \
        | {u for u in after - before if last.get(u) != "allocation.decided"}


def _ledger_problems(facts: Facts) -> list[str]:
    """Invariant 3, against the pods as read just before and just after the ledger.

    A pod that finished between the reads may already be released (and one bound between them
    already decided): its entry may match the second read, but only where the stream's last word
    on it says so. A pod live (or finished) in both reads must match the ledger exactly.
    """
    after_pods = facts.pods if facts.pods_after is None else facts.pods_after
    before, after = _live_uids(facts.pods), _live_uids(after_pods)
    unseen = changes_unseen(facts)
    missing = {u for u in before - facts.ledger if u in after or u in unseen}
    extra = {u for u in facts.ledger - before if u not in after or u in unseen}
    if not missing and not extra:
        return []
    names = {p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}"
             for p in (*facts.pods, *after_pods)}
    return [f"ledger != live pods: extra {sorted(extra)[:5]}, "
            f"missing {sorted(names.get(u, u) for u in missing)[:5]}"]


def check(facts: Facts, *, allow_failed: frozenset[str] = frozenset(),
          allow_pending: bool = True) -> list[str]:
    """Every violated invariant as a sentence (empty when all hold)."""
    problems = replay_overcommit(facts.events)
    devmem = {d["id"]: d["devmem"] for e in facts.events if e.get("kind") == "inventory.snapshot"
              for d in e["devices"]}
    refused = [e for e in facts.events if e.get("kind") == "pod.unschedulable"]
    unschedulable = {e.get("uid") for e in refused} | {f"{e['namespace']}/{e['name']}" for e in refused}
    for pod in facts.pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        name, uid, phase = f"{meta['namespace']}/{meta['name']}", meta["uid"], status.get("phase", "Pending")
        if phase in ("Running", "Succeeded"):
            record = facts.admissions.get(uid)
            if record is None:
                problems.append(f"{name} is {phase} but no kubelet admitted it")
            else:
                problems += _expected_envs(pod, record, devmem)
        elif phase == "Pending":
            if not allow_pending:
                problems.append(f"{name} is still Pending")
            elif not (pod.get("spec") or {}).get("nodeName") and uid not in unschedulable \
                    and name not in unschedulable:
                problems.append(f"{name} is Pending without a published pod.unschedulable reason")
        elif phase == "Failed" and meta["name"] not in allow_failed:
            problems.append(f"{name} Failed: {status.get('reason')}: {status.get('message')}")
    problems += _ledger_problems(facts)
    stuck = sorted(k for k in facts.locks if k.startswith("alloc."))
    if stuck:
        problems.append(f"Allocate lease keys in locks (gone since issue 32): {stuck[:5]}")
    return problems
