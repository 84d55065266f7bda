"""The Fit engine: can this pod run on this node, on which devices, and why not (HAMi §3, §3c).

API:
    NodeState(name, devices, usage, annotations)   one node's inventory + current per-device usage
        .from_usage(name, devices, {uuid: DeviceUsage}, annotations); .with_pod(devices, init_count)
    Policies(node="binpack", gpu="spread")         scheduler defaults; pod annotations override them
    Quota(memory_limit, cores_limit, memory_used, cores_used, memory_factor)   a namespace's ResourceQuota
    fit_pod(node, pod, policy, quota) -> NodeFit   fit, node score, reason string, reason counts, PodDevices
    filter_nodes(nodes, pod, policy, quota) -> FilterResult   every fitting node with its score, the best
        one with devices, and (lazily) the exact HAMi reason string of every failed node
    apply(usage, devices, init_count) / release(...)   per-device usage plus/minus a pod (init collapse)

Checks run per device in HAMi's order (health, cordon, type/mode, NUMA, UUID, slots, mutex, quota,
memory, cores, exclusive, compute units, MIG); the scan goes from the end of the policy-sorted list.
A card in ``mig`` mode gives each card of a container a MIG profile and placement
(:mod:`services.scheduler.mig`; ``CardMigTopologyInfeasible`` when none is free) and is examined
again after a pick, so one container may hold several instances of it (HAMi ``device.go``); a MIG
request skips the "more cards than the node has" check (HAMi ``score.go`` ``isMIGRequest``). A
container never mixes MIG instances and shared cards (the node-agent refuses that, by the same
rule: :mod:`shared.allocation_rules`): on a node with both, the scan runs per kind.

Pods with a single GPU container and no filters take the exact shortcut of
:mod:`services.scheduler.fastpath` over precomputed per-node free capacity; results are memoised per
immutable NodeState (:mod:`services.scheduler.nodestate`, which also owns ``apply``/``release``; both
are re-exported here, the public face of the engine). Pure: no I/O, no clocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from services.scheduler.fastpath import MEMO_LIMIT, ShapeKey, remember, shape_key, simple_fit, simple_reasons
from services.scheduler.mig import kind_groups, pick_instance
from services.scheduler.nodestate import NodeState, apply, release
from services.scheduler.reasons import Reason, gen_reason
from services.scheduler.score import (
    DEFAULT_WEIGHTS,
    GpuPolicy,
    ScoringWeights,
    best_node,
    device_order,
    device_score,
    parse_scoring_weights,
    pick_topology,
    policy_chain,
)
from shared import annotations as ann
from shared.allocation_rules import CardKind, card_kind
from shared.model import (
    NVIDIA,
    PERCENT_UNSET,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceMode,
    MigPlacement,
    NodeName,
    PodDevices,
    PodRequest,
)

__all__ = [
    "DEFAULT_POLICIES",
    "FilterResult",
    "NodeFit",
    "NodeState",
    "Policies",
    "Quota",
    "apply",
    "filter_nodes",
    "fit_pod",
    "release",
    "type_matches",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Policies:
    """Scheduler-wide defaults (``--node-scheduler-policy``, ``--gpu-scheduler-policy``)."""

    node: str = "binpack"
    gpu: str = "spread"


DEFAULT_POLICIES = Policies()


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    """The namespace's ResourceQuota on GPU memory/cores; ``None`` limits are not enforced."""

    memory_limit: int | None = None
    """``limits.<memory resource>`` as written in the quota (multiplied by ``memory_factor``)."""
    cores_limit: int | None = None
    memory_used: int = 0
    """MiB already used by the namespace's other pods."""
    cores_used: int = 0
    memory_factor: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeFit:
    """The verdict for one node; ``devices`` has one slot per container (init first) when ``fit``."""

    node: NodeName
    fit: bool
    score: float
    reason: str = ""
    reasons: Mapping[str, int] = field(default_factory=dict)
    devices: PodDevices = ()


# --- the pod side, prepared once per call ------------------------------------------------------


@lru_cache(maxsize=4096)
def _tokens(text: str) -> tuple[str, ...]:
    return tuple(t for t in re.split(r"[-\s_]+", text.lower()) if t)


def type_matches(entry: str, device_type: str) -> bool:
    """Whole-token match: ``A10`` matches ``NVIDIA-A10`` but not ``NVIDIA-A100`` (contract item 6)."""
    want, have = _tokens(entry), _tokens(device_type)
    n = len(want)
    return n > 0 and any(have[i : i + n] == want for i in range(len(have) - n + 1))


class _Pod:
    """Everything about the pod that does not depend on the node."""

    __slots__ = (
        "chain",
        "containers",
        "init_count",
        "mode",
        "mutex",
        "node_policy",
        "nouse_types",
        "nouse_uuids",
        "numa_bind",
        "order",
        "quota",
        "simple",
        "topology",
        "use_types",
        "use_uuids",
        "weights",
    )

    def __init__(self, pod: PodRequest, policy: Policies, quota: Quota | None) -> None:
        a = pod.annotations
        self.containers = pod.containers
        self.init_count = sum(1 for c in pod.containers if c.init)
        self.chain = policy_chain(a.get(ann.GPU_SCHEDULER_POLICY) or policy.gpu)
        self.mutex = GpuPolicy.MUTEX in self.chain
        self.topology = GpuPolicy.TOPOLOGY in self.chain
        self.node_policy = a.get(ann.NODE_SCHEDULER_POLICY) or policy.node
        self.numa_bind = ann.parse_bool(a.get(ann.NUMA_BIND, "")) is True
        self.use_types = ann.parse_list(a.get(ann.USE_GPUTYPE))
        self.nouse_types = ann.parse_list(a.get(ann.NOUSE_GPUTYPE))
        self.use_uuids = frozenset(ann.parse_list(a.get(ann.USE_GPUUUID)))
        self.nouse_uuids = frozenset(ann.parse_list(a.get(ann.NOUSE_GPUUUID)))
        self.mode = a.get(ann.VGPU_MODE)
        self.weights: ScoringWeights = (
            parse_scoring_weights(a[ann.DEVICE_SCORING_WEIGHTS])
            if ann.DEVICE_SCORING_WEIGHTS in a
            else DEFAULT_WEIGHTS
        )
        self.order = device_order(self.chain, self.numa_bind)
        self.quota = quota
        self.simple = self._simple_key()

    def _simple_key(self) -> ShapeKey | None:
        gpu = [c for c in self.containers if c.request is not None]
        if (
            len(gpu) != 1
            or gpu[0].init
            or self.mutex
            or self.topology
            or self.numa_bind
            or self.quota
            or self.use_types
            or self.nouse_types
            or self.use_uuids
            or self.nouse_uuids
            or self.mode is not None
            or gpu[0].request is None
        ):
            return None
        return shape_key(gpu[0].request)

    def type_ok(self, d: DeviceInfo, req: ContainerRequest) -> bool:
        if any(type_matches(t, d.type) for t in self.nouse_types):
            return False
        if self.use_types and not any(type_matches(t, d.type) for t in self.use_types):
            return False
        if self.mode is not None and d.mode not in self.mode:
            return False
        return req.type == NVIDIA

    def uuid_ok(self, d: DeviceInfo) -> bool:
        """Both lists apply, as HAMi v2.10's ``CheckUUID``: a card named in both is excluded."""
        if self.use_uuids and d.id not in self.use_uuids:
            return False
        return d.id not in self.nouse_uuids


# --- the full check chain ----------------------------------------------------------------------


def _quota_ok(
    p: _Pod,
    prior: list[tuple[ContainerDevice, ...]],
    picks: list[ContainerDevice],
    cand: ContainerDevice,
    init: bool,
) -> bool:
    q = p.quota
    if q is None:
        return True
    slots = (*prior, (*picks, cand))
    init_count = min(p.init_count, len(prior) + (1 if init else 0))
    use = ann.collapse_usage(slots, init_count).values()
    if (
        q.memory_limit is not None
        and q.memory_used + sum(u.usedmem for u in use) > q.memory_limit * q.memory_factor
    ):
        return False
    return not (q.cores_limit is not None and q.cores_used + sum(u.usedcores for u in use) > q.cores_limit)


def _pre_quota(p: _Pod, d: DeviceInfo, used: int) -> str | None:
    """Checks 5-7: UUID filter, free slots, mutex."""
    if not p.uuid_ok(d):
        return Reason.CARD_UUID_MISMATCH
    if d.count <= used:
        return Reason.CARD_TIME_SLICING_EXHAUSTED
    if p.mutex and used > 0:
        return Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    return None


def _post_quota(d: DeviceInfo, row: list[int], memreq: int, coresreq: int) -> str | None:
    """Checks 11-14: memory, cores, exclusive card, compute units (15, MIG, is :func:`_mig_pick`)."""
    used, usedmem, usedcores = row
    if d.devmem - usedmem < memreq:
        return Reason.CARD_INSUFFICIENT_MEMORY
    if d.devcore - usedcores < coresreq:
        return Reason.CARD_INSUFFICIENT_CORE
    if d.devcore == 100 and coresreq == 100 and used > 0:
        return Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if d.devcore != 0 and usedcores == d.devcore and coresreq == 0:
        return Reason.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def _is_mig_request(node: NodeState, cand: list[int], p: _Pod) -> bool:
    """HAMi ``isMIGRequest``: no ``vgpu-mode`` other than mig, and some candidate card is in mig mode."""
    if p.mode is not None and DeviceMode.MIG not in p.mode:
        return False
    return any(card_kind(node.devices[i]) is CardKind.MIG for i in cand)


def _sorted_candidates(node: NodeState, work: list[list[int]], req: ContainerRequest, p: _Pod) -> list[int]:
    devs = node.devices
    cand = [i for i in node.derived.nv if req.type.lower() in devs[i].type.lower()]
    cand.sort(
        key=lambda i: p.order(
            device_score(devs[i], *work[i], request=req, weights=p.weights),
            devs[i].numa,
            work[i][0],
            devs[i].index,
        )
    )
    return cand


def _fit_container(
    node: NodeState,
    work: list[list[int]],
    req: ContainerRequest,
    p: _Pod,
    *,
    init: bool,
    prior: list[tuple[ContainerDevice, ...]],
    held: list[list[MigPlacement]],
) -> tuple[tuple[ContainerDevice, ...] | None, dict[str, int], int]:
    """HAMi's per-container Fit: devices (or None), reason counts, devices passed in.

    A container gets one kind of card (:mod:`shared.allocation_rules`): on a node with cards in
    mig mode beside shared ones, HAMi's scan runs over each kind alone, in the order the scan meets
    them, and the first that fits wins; when none does, each card's reason comes from the scan
    of its own kind.
    """
    cand = _sorted_candidates(node, work, req, p)
    total = len(cand)
    if req.nums > total and not _is_mig_request(node, cand, p):
        return None, {Reason.NODE_INSUFFICIENT_DEVICE: 1}, total
    groups = kind_groups(node.devices, cand) if node.derived.has_mig else [cand]
    merged: dict[str, int] = {}
    for group in groups:
        picks, reasons = _scan(node, work, req, p, group, init=init, prior=prior, held=held)
        if picks is not None:
            return picks, reasons, total
        for reason, n in reasons.items():
            merged[reason] = merged.get(reason, 0) + n
    return None, merged, total


def _scan(
    node: NodeState,
    work: list[list[int]],
    req: ContainerRequest,
    p: _Pod,
    cand: list[int],
    *,
    init: bool,
    prior: list[tuple[ContainerDevice, ...]],
    held: list[list[MigPlacement]],
) -> tuple[tuple[ContainerDevice, ...] | None, dict[str, int]]:
    """HAMi's device scan over ``cand`` (orchestration): from the end, checks in HAMi's order."""
    reasons: dict[str, int] = {}
    nums, coresreq, prevnuma = req.nums, req.coresreq, None
    picks: list[ContainerDevice] = []
    pos = len(cand)
    while pos > 0:
        pos -= 1
        i = cand[pos]
        d = node.devices[i]
        why: str | None = None
        if not d.health:
            why = Reason.CARD_NOT_HEALTH
        elif d.id in node.derived.cordon:
            why = Reason.CARD_CORDONED
        elif not p.type_ok(d, req):
            why = Reason.CARD_TYPE_MISMATCH
        else:
            if p.numa_bind and prevnuma != d.numa:
                if nums != req.nums:
                    reasons[Reason.NUMA_NOT_FIT] = reasons.get(Reason.NUMA_NOT_FIT, 0) + len(picks)
                nums, prevnuma, picks = req.nums, d.numa, []
            why = _pre_quota(p, d, work[i][0])
        if why is None:
            coresreq = min(coresreq, 100)  # sticky for the devices scanned after this one
            memreq = req.memreq
            if req.mempercentagereq != PERCENT_UNSET and req.memreq == 0:
                memreq = d.devmem * req.mempercentagereq // 100
            took = ContainerDevice(uuid=d.id, type=NVIDIA, usedmem=memreq, usedcores=coresreq, idx=d.index)
            why = (
                Reason.RESOURCE_QUOTA_NOT_FIT
                if not _quota_ok(p, prior, picks, took, init)
                else _post_quota(d, work[i], memreq, coresreq)
            )
            if why is None and card_kind(d) is CardKind.MIG:
                mig = pick_instance(d, held[i], picks, took)
                if mig is None:
                    why = Reason.CARD_MIG_TOPOLOGY_INFEASIBLE
                else:
                    took = mig
        if why is not None:
            reasons[why] = reasons.get(why, 0) + 1
            continue
        picks.append(took)
        if not p.topology:
            nums -= 1
            if nums == 0:
                return tuple(picks), reasons
        if card_kind(d) is CardKind.MIG:
            pos += 1  # HAMi looks at a MIG card again (topology-aware too): it may give another instance
    return _finish(node, req=req, p=p, picks=picks, reasons=reasons)


def _finish(
    node: NodeState,
    *,
    req: ContainerRequest,
    p: _Pod,
    picks: list[ContainerDevice],
    reasons: dict[str, int],
) -> tuple[tuple[ContainerDevice, ...] | None, dict[str, int]]:
    """After the scan: the topology-aware choice, or the failure with its taken-card count."""
    if p.topology and len(picks) >= req.nums:
        if len(picks) > req.nums:
            chosen = pick_topology([c.uuid for c in picks], req.nums, node.derived.pairs)
            picks = [picks[k] for k in chosen]
        return tuple(picks), reasons
    if picks:
        reasons[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(picks)
    return None, reasons


def _fit_node(node: NodeState, p: _Pod) -> NodeFit:
    """HAMi ``calcScore`` for one node: init containers on fresh copies, app containers in sequence.

    MIG placements are the exception to the fresh copies: the node-agent makes every container's
    instance when the pod is admitted, init containers' too, so no two of a pod's may overlap
    (:func:`shared.allocation_rules.pod_problem`); each container sees all earlier ones' instances.
    """
    base = [[u.used, u.usedmem, u.usedcores] for u in node.usage]
    app = [row[:] for row in base]
    held = [list(u.mig) for u in node.usage] if node.derived.has_mig else []  # cards in mig mode only
    slots: list[tuple[ContainerDevice, ...]] = []
    score = node.derived.score
    index = {d.id: i for i, d in enumerate(node.devices)}
    for spec in p.containers:
        req = spec.request
        if req is None:
            slots.append(())
            continue
        work = [row[:] for row in base] if spec.init else app
        picks, reasons, total = _fit_container(node, work, req, p, init=spec.init, prior=slots, held=held)
        if picks is None:
            return NodeFit(
                node=node.name, fit=False, score=score, reason=gen_reason(reasons, total), reasons=reasons
            )
        slots.append(picks)
        for c in picks:
            if c.mig is not None:
                held[index[c.uuid]].append(c.mig.placement)
            if not spec.init:
                row = app[index[c.uuid]]
                row[0], row[1], row[2] = row[0] + 1, row[1] + c.usedmem, row[2] + c.usedcores
    return NodeFit(node=node.name, fit=True, score=score, devices=tuple(slots))


# --- API -----------------------------------------------------------------------------------------


def fit_pod(
    node: NodeState, pod: PodRequest, policy: Policies = DEFAULT_POLICIES, quota: Quota | None = None
) -> NodeFit:
    """The full HAMi check chain for one node with the devices chosen (AnnotationError on bad weights)."""
    return _fit_node(node, _Pod(pod, policy, quota))


class FilterResult:
    """Every fitting node with its score, the chosen one, and the failed ones (reasons computed lazily)."""

    __slots__ = ("_done", "_exact", "_failed_nodes", "_pod", "best", "fits", "policy")

    def __init__(
        self,
        fits: list[tuple[NodeName, float]],
        failed: list[NodeState],
        pod: _Pod,
        best: NodeFit | None,
        exact: dict[NodeName, NodeFit],
    ) -> None:
        self.fits: tuple[tuple[NodeName, float], ...] = tuple(fits)
        """(node, score) for every fitting node, in input order."""
        self.best = best
        """The node the node policy picks, with the pod's devices on it; None when nothing fits."""
        self.policy = pod.node_policy
        self._pod = pod
        self._failed_nodes = failed
        self._exact = exact
        self._done = False

    @property
    def failed(self) -> dict[NodeName, str]:
        """node -> HAMi reason string (``"2/8 CardInsufficientMemory, 6/8 ..."``) for every failed node."""
        return {name: nf.reason for name, nf in self.failed_fits().items()}

    def failed_fits(self) -> dict[NodeName, NodeFit]:
        """node -> NodeFit (fit False, reason, reason counts) for every failed node, in input order."""
        if not self._done:
            self._exact = {
                n.name: self._exact.get(n.name) or _failed_fit(n, self._pod) for n in self._failed_nodes
            }
            self._done = True
        return self._exact


def _failed_fit(node: NodeState, p: _Pod) -> NodeFit:
    d = node.derived
    if p.simple is None or d.has_mig:
        return _fit_node(node, p)
    key = ("failed", p.simple)
    nf = d.memo.get(key)
    if not isinstance(nf, NodeFit):
        reasons = simple_reasons(d.free, *p.simple)
        nf = NodeFit(
            node=node.name, fit=False, score=d.score, reason=gen_reason(reasons, len(d.nv)), reasons=reasons
        )
        remember(d.memo, key, nf)
    return nf


def filter_nodes(
    nodes: Sequence[NodeState],
    pod: PodRequest,
    policy: Policies = DEFAULT_POLICIES,
    quota: Quota | None = None,
    *,
    choose: bool = True,
) -> FilterResult:
    """Filter and score ``nodes`` for ``pod`` (raises AnnotationError when the scoring weights are bad).

    ``choose=False`` skips computing the devices on the best node (the extender's multi-node mode).
    """
    p = _Pod(pod, policy, quota)
    fits: list[tuple[NodeName, float]] = []
    failed: list[NodeState] = []
    exact: dict[NodeName, NodeFit] = {}
    key = p.simple
    for node in nodes:
        d = node.derived
        if key is None or d.has_mig:
            nf = _fit_node(node, p)
            if nf.fit:
                fits.append(d.entry)
            else:
                exact[node.name] = nf
                failed.append(node)
            continue
        memo = d.memo
        ok = memo.get(key)
        if ok is None:
            ok = simple_fit(d.free, *key)
            # remember() inlined: this miss runs once per node on the cold path
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[key] = ok
        if ok:
            fits.append(d.entry)
        else:
            failed.append(node)
    best: NodeFit | None = None
    name = best_node(fits, p.node_policy) if choose else None
    if name is not None:
        best = _fit_node(next(n for n in nodes if n.name == name), p)
    return FilterResult(fits, failed, p, best, exact)
