"""``gpubus explain`` core: a cluster snapshot + a pod -> why each node fits or not (pure, no I/O).

API:
    load_cluster(data) -> list[NodeState]     parsed CLUSTER.json -> node states; SnapshotError names the
                                              offending field (``nodes[0].devices[2].devmem: ...``)
    load_residents(data, nodes) -> {node: [Resident]}   the optional ``pods`` list: who holds the slices
    pod_priority(manifest) -> (priority, preemptionPolicy)   the pending pod's, from its spec
    explain(nodes, pod, policy, pending) -> Report   runs the scheduler's own filter_nodes / fit_pod,
                                              and for a pod that fits nowhere, :mod:`preempt`'s plan
    render_table(report) -> str               the human view

CLUSTER.json: ``{"nodes": [{"name", "annotations", "devices": [{"id", "index", "type", "count", "devmem",
"devcore", "numa", "mode", "health", "migProfiles", "used", "usedmem", "usedcores", "mig"}]}]}``
(``migProfiles`` as the register JSON writes it; ``mig``: the placements ``[{"start", "size"}]`` held
by MIG instances), and optionally ``"pods"``: ledger entries as the ``allocations`` bucket holds them
(``{"pod_uid", "namespace", "name", "node", "devices", "containers", "init_count", "state"}``) plus the
pod's ``"priority"`` (0 when missing); failed entries hold nothing. Unknown fields are ignored;
missing usage means 0, missing ``health`` healthy, missing ``count`` the default split count (10). The JSON
report shape is a stable interface. This module must not read files or print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from services.scheduler.fit import DEFAULT_POLICIES, NodeFit, NodeState, Policies, filter_nodes, fit_pod
from services.scheduler.preempt import Plan, Preemption, PreemptionPolicy, Resident, plan
from shared.annotations import (
    decode_mig_placement,
    decode_mig_profiles,
    encode_mig_allocations,
    encode_pod_devices,
)
from shared.codec import from_wire
from shared.errors import AnnotationError, BadInput, EventDecodeError
from shared.model import (
    PERCENT_UNSET,
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    MigPlacement,
    MigProfile,
    NodeName,
    PodRequest,
)

DEFAULT_SPLIT = 10
"""HAMi deviceSplitCount default, used when a device has no ``count``."""


class SnapshotError(BadInput):
    """CLUSTER.json does not have the documented shape; the message names the field."""


class RequestView(TypedDict):
    name: str
    nums: int
    memreq: int
    mempercentagereq: int
    coresreq: int


class MigView(TypedDict):
    profile: str
    start: int
    size: int


class DeviceView(TypedDict):
    uuid: str
    type: str
    usedmem: int
    usedcores: int
    mig: NotRequired[MigView]
    """Only on a card in ``mig`` mode: the MIG instance it gives (profile and placement)."""


class NodeView(TypedDict):
    fit: bool
    score: float
    reason: str
    reasons: dict[str, int]
    containers: list[list[DeviceView]]
    annotation: str
    mig_annotation: NotRequired[str]
    """Only when the pod gets MIG instances: ``hami.io/vgpu-mig-allocations`` as bind writes it."""


class VictimView(TypedDict):
    namespace: str
    name: str
    uid: str
    priority: int
    cards: list[str]


class NodePreemptionView(TypedDict, total=False):
    card: str | None
    """The card every victim holds a slice of; null when they only share the node."""
    victims: list[VictimView]
    containers: list[list[DeviceView]]
    """The pod's devices once the victims are gone."""
    reason: str
    """Instead of the rest: why this node has no preemption."""


class PreemptionView(TypedDict):
    priority: int
    policy: str
    node: str | None
    """The node the plan picks; null when none can make room (``reason`` says why)."""
    reason: str
    nodes: dict[str, NodePreemptionView]


class Report(TypedDict):
    chosen: str | None
    requests: list[RequestView]
    nodes: dict[str, NodeView]
    preemption: NotRequired[PreemptionView]
    """Only when the snapshot lists ``pods`` and the pod fits no node: who would have to go."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """What preemption needs to know besides the nodes: who holds slices, and the pod's own standing."""

    residents: Mapping[NodeName, Sequence[Resident]]
    priority: int = 0
    policy: str = PreemptionPolicy.PREEMPT_LOWER_PRIORITY


def _int(obj: Mapping[str, object], key: str, where: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if value is None:
        raise SnapshotError(f"{where}.{key}: required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{where}.{key}: expected an integer, got {value!r}")
    if value < 0:
        raise SnapshotError(f"{where}.{key}: must not be negative, got {value}")
    return value


def _str(obj: Mapping[str, object], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str) or (default is None and not value):
        raise SnapshotError(f"{where}.{key}: expected a non-empty string, got {value!r}")
    return value


def _device(raw: object, where: str, position: int) -> tuple[DeviceInfo, DeviceUsage]:
    if not isinstance(raw, dict):
        raise SnapshotError(f"{where}: expected an object")
    health = raw.get("health", True)
    if not isinstance(health, bool):
        raise SnapshotError(f"{where}.health: expected true or false, got {health!r}")
    info = DeviceInfo(
        id=DeviceUUID(_str(raw, "id", where)),
        index=_int(raw, "index", where, position),
        type=_str(raw, "type", where, "NVIDIA"),
        count=_int(raw, "count", where, DEFAULT_SPLIT),
        devmem=_int(raw, "devmem", where),
        devcore=_int(raw, "devcore", where, 100),
        numa=_int(raw, "numa", where, 0),
        mode=_str(raw, "mode", where, "hami-core"),
        health=health,
        mig_profiles=_mig_profiles(raw, where),
    )
    use = DeviceUsage(
        used=_int(raw, "used", where, 0),
        usedmem=_int(raw, "usedmem", where, 0),
        usedcores=_int(raw, "usedcores", where, 0),
        mig=_mig_held(raw, where),
    )
    return info, use


def _mig_profiles(raw: Mapping[str, object], where: str) -> tuple[MigProfile, ...]:
    try:
        return decode_mig_profiles(raw.get("migProfiles"), f"{where}.migProfiles")
    except AnnotationError as e:
        raise SnapshotError(str(e)) from None


def _mig_held(raw: Mapping[str, object], where: str) -> tuple[MigPlacement, ...]:
    held = raw.get("mig") or []
    if not isinstance(held, list):
        raise SnapshotError(f"{where}.mig: expected a list of placements")
    try:
        return tuple(decode_mig_placement(p, f"{where}.mig[{i}]") for i, p in enumerate(held))
    except AnnotationError as e:
        raise SnapshotError(str(e)) from None


def _node(raw: object, where: str) -> NodeState:
    if not isinstance(raw, dict):
        raise SnapshotError(f"{where}: expected an object")
    name = _str(raw, "name", where)
    annotations = raw.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        raise SnapshotError(f"{where}.annotations: expected an object of strings")
    devices = raw.get("devices", [])
    if not isinstance(devices, list):
        raise SnapshotError(f"{where}.devices: expected a list")
    pairs = [_device(d, f"{where}.devices[{i}]", i) for i, d in enumerate(devices)]
    seen = [d.id for d, _ in pairs]
    if len(set(seen)) != len(seen):
        raise SnapshotError(f"{where}.devices: duplicate device id")
    return NodeState(
        name=NodeName(name),
        devices=tuple(d for d, _ in pairs),
        usage=tuple(u for _, u in pairs),
        annotations=dict(annotations),
    )


def load_cluster(data: object) -> list[NodeState]:
    """Validate a parsed CLUSTER.json and build one NodeState per node."""
    if not isinstance(data, dict):
        raise SnapshotError('cluster: expected a JSON object with a "nodes" list')
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise SnapshotError("nodes: expected a list")
    states = [_node(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
    names = [s.name for s in states]
    if len(set(names)) != len(names):
        raise SnapshotError("nodes: duplicate node name")
    return states


def _requests(pod: PodRequest) -> list[RequestView]:
    out: list[RequestView] = []
    for c in pod.containers:
        r = c.request
        out.append(
            RequestView(
                name=c.name,
                nums=r.nums if r else 0,
                memreq=r.memreq if r else 0,
                mempercentagereq=r.mempercentagereq if r else PERCENT_UNSET,
                coresreq=r.coresreq if r else 0,
            )
        )
    return out


def _view(nf: NodeFit) -> NodeView:
    view = NodeView(
        fit=nf.fit,
        score=round(nf.score, 6),
        reason=nf.reason,
        reasons={str(k): v for k, v in sorted(nf.reasons.items())},
        containers=[[_device_view(d) for d in slot] for slot in nf.devices],
        annotation=encode_pod_devices(nf.devices) if nf.fit else "",
    )
    mig = encode_mig_allocations(nf.devices) if nf.fit else ""
    if mig:
        view["mig_annotation"] = mig
    return view


def _device_view(d: ContainerDevice) -> DeviceView:
    view = DeviceView(uuid=d.uuid, type=d.type, usedmem=d.usedmem, usedcores=d.usedcores)
    if d.mig is not None:
        view["mig"] = MigView(profile=d.mig.profile, start=d.mig.placement.start, size=d.mig.placement.size)
    return view


def load_residents(data: object, nodes: Sequence[NodeState]) -> dict[NodeName, list[Resident]] | None:
    """The snapshot's ``pods`` by node (None when it has none); SnapshotError names a bad field."""
    if not isinstance(data, dict) or "pods" not in data:
        return None
    pods = data["pods"]
    if not isinstance(pods, list):
        raise SnapshotError("pods: expected a list")
    cards = {n.name: {d.id for d in n.devices} for n in nodes}
    out: dict[NodeName, list[Resident]] = {n.name: [] for n in nodes}
    for i, raw in enumerate(pods):
        where = f"pods[{i}]"
        if not isinstance(raw, dict):
            raise SnapshotError(f"{where}: expected an object")
        try:
            entry = from_wire(Allocation, {k: v for k, v in raw.items() if k != "priority"}, where)
        except EventDecodeError as e:
            raise SnapshotError(str(e)) from None
        priority = raw.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise SnapshotError(f"{where}.priority: expected an integer, got {priority!r}")
        if entry.node not in cards:
            raise SnapshotError(f"{where}.node: no node {entry.node!r} in the snapshot")
        if entry.state is AllocationState.FAILED:
            continue
        unknown = sorted({d.uuid for slot in entry.devices for d in slot} - cards[entry.node])
        if unknown:
            raise SnapshotError(f"{where}.devices: {unknown[0]} is not a device of node {entry.node}")
        out[entry.node].append(
            Resident(
                uid=entry.pod_uid,
                namespace=entry.namespace,
                name=entry.name,
                priority=priority,
                devices=entry.devices,
                init_count=entry.init_count,
            )
        )
    return out


def pod_priority(manifest: Mapping[str, object]) -> tuple[int, str]:
    """The pending pod's ``spec.priority`` (0 when unset) and ``spec.preemptionPolicy``."""
    spec = manifest.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadInput(f"spec.priority: expected an integer, got {priority!r}")
    policy = spec.get("preemptionPolicy") or PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    if policy not in PreemptionPolicy.__members__.values():
        expected = ", ".join(PreemptionPolicy)
        raise BadInput(f"spec.preemptionPolicy: expected one of {expected}, got {policy!r}")
    return priority, str(policy)


def explain(
    nodes: Sequence[NodeState],
    pod: PodRequest,
    policy: Policies = DEFAULT_POLICIES,
    pending: Pending | None = None,
) -> Report:
    """Filter and score every node exactly as the scheduler does; raises AnnotationError on bad weights.

    With ``pending`` (who holds the slices, the pod's priority), a pod that fits no node also gets
    the preemption that would make room (:func:`services.scheduler.preempt.plan`).
    """
    result = filter_nodes(nodes, pod, policy)
    failed = result.failed_fits()
    views: dict[str, NodeView] = {}
    for node in nodes:
        nf = failed.get(node.name) or fit_pod(node, pod, policy)
        views[node.name] = _view(nf)
    chosen = result.best.node if result.best is not None else None
    report = Report(chosen=chosen, requests=_requests(pod), nodes=views)
    if pending is not None and chosen is None:
        found = plan(
            nodes, pending.residents, pod, pending.priority, preemption_policy=pending.policy, policies=policy
        )
        report["preemption"] = _preemption_view(found, pending)
    return report


def _preemption_view(found: Plan, pending: Pending) -> PreemptionView:
    best = found.best
    return PreemptionView(
        priority=pending.priority,
        policy=pending.policy,
        node=best.node if best is not None else None,
        reason=found.reason,
        nodes={
            node: _node_preemption(p) if isinstance(p, Preemption) else NodePreemptionView(reason=p)
            for node, p in found.per_node.items()
        },
    )


def _node_preemption(p: Preemption) -> NodePreemptionView:
    return NodePreemptionView(
        card=p.card,
        victims=[
            VictimView(
                namespace=v.namespace, name=v.name, uid=v.uid, priority=v.priority, cards=sorted(v.cards)
            )
            for v in p.victims
        ],
        containers=[[_device_view(d) for d in slot] for slot in p.fit.devices],
    )


def _describe(r: RequestView) -> str:
    if r["nums"] == 0:
        return f"{r['name']}: no GPU"
    pct = r["mempercentagereq"]
    mem = f"{r['memreq']} MiB" if r["memreq"] else f"{pct} % memory"
    return f"{r['name']}: {r['nums']} x ({mem}, {r['coresreq']} % cores)"


def _mig_text(d: DeviceView) -> str:
    mig = d.get("mig")
    return "" if mig is None else f",MIG {mig['profile']} at slice {mig['start']}"


def render_table(report: Report, pod_name: str = "") -> str:
    """A table a person reads at a glance: one line per node, fitting nodes first, best first."""
    chosen = report["chosen"]
    lines = [f"pod {pod_name}: " + (f"fits, chosen node {chosen}" if chosen else "fits no node")]
    lines += ["  " + _describe(r) for r in report["requests"]]
    rows = sorted(report["nodes"].items(), key=lambda kv: (not kv[1]["fit"], kv[0] != chosen, kv[0]))
    width = max([4, *(len(n) for n in report["nodes"])])
    lines.append(f"{'NODE':<{width}}  FIT  SCORE   DEVICES / WHY NOT")
    for name, v in rows:
        if v["fit"]:
            detail = "; ".join(
                " ".join(f"{d['uuid']}({d['usedmem']}MiB,{d['usedcores']}%{_mig_text(d)})" for d in slot)
                for slot in v["containers"]
                if slot
            )
        else:
            detail = v["reason"]
        mark = "*" if name == chosen else " "
        score = f"{v['score']:6.2f}" if v["fit"] else f"{'-':>6}"  # a score only ranks nodes that fit
        lines.append(f"{name:<{width}} {mark}{'yes' if v['fit'] else 'no ':<3}  {score}  {detail}")
    if "preemption" in report:
        lines += _render_preemption(report["preemption"], width)
    return "\n".join(lines)


def _render_preemption(view: PreemptionView, width: int) -> list[str]:
    """Who would have to go, best node first: ``node-a  on GPU-1: ns/a (priority 0), ...``."""
    head = f"preemption (priority {view['priority']}, {view['policy']}): "
    chosen = view["node"]
    lines = [head + (f"room on {chosen} by evicting" if chosen else f"none ({view['reason']})")]
    rows = sorted(view["nodes"].items(), key=lambda kv: (kv[0] != chosen, "reason" in kv[1], kv[0]))
    for name, p in rows:
        if "reason" in p:
            lines.append(f"  {name:<{width}}  {p['reason']}")
            continue
        where = f"on {p.get('card')}" if p.get("card") else "across the node"
        victims = ", ".join(
            f"{v['namespace']}/{v['name']} (priority {v['priority']})" for v in p.get("victims", [])
        )
        mark = "*" if name == chosen else " "
        lines.append(f" {mark}{name:<{width}}  {where}: {victims}")
    return lines
