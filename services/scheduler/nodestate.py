"""One node as the Fit engine sees it: inventory, per-device usage, annotations, and the
request-independent facts precomputed once per (immutable) :class:`NodeState`; plus how a pod's
usage is added to or taken from per-device usage (HAMi init-container collapse).

Must not know how a pod is judged against a node (that is :mod:`services.scheduler.fit`) nor
where the usage comes from (the ledger). Pure: no I/O, no clocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from services.scheduler.fastpath import FreeCapacity
from services.scheduler.score import node_score
from shared import annotations as ann
from shared.errors import AnnotationError
from shared.model import (
    NVIDIA,
    DeviceInfo,
    DeviceMode,
    DeviceUsage,
    DeviceUUID,
    MigPlacement,
    NodeName,
    PodDevices,
)

IDLE = DeviceUsage()
_NVIDIA = NVIDIA.lower()


class NodeFacts:
    """Per-node facts precomputed once per NodeState (NodeState is immutable), and its memo."""

    __slots__ = ("cordon", "entry", "free", "has_mig", "memo", "nv", "pairs", "score")

    def __init__(
        self,
        name: NodeName,
        devices: tuple[DeviceInfo, ...],
        usage: tuple[DeviceUsage, ...],
        annotations: Mapping[str, str],
    ) -> None:
        self.cordon = frozenset(ann.parse_list(annotations.get(ann.DEVICE_CORDON)))
        try:
            self.pairs = (
                ann.decode_pair_scores(annotations[ann.NODE_SCORE]) if ann.NODE_SCORE in annotations else {}
            )
        except AnnotationError:
            self.pairs = {}  # HAMi treats unreadable topology scores as absent
        self.score = node_score(devices, usage)
        self.entry = (name, self.score)
        """(node, score) as the filter lists a fitting node; built once, not per pod."""
        nv: list[int] = []
        has_mig = False
        for i, d in enumerate(devices):  # one pass: this runs for every node on every usage change
            if _NVIDIA in d.type.lower():
                nv.append(i)
                has_mig = has_mig or d.mode == DeviceMode.MIG
        self.nv = tuple(nv)
        self.has_mig = has_mig
        self.free = FreeCapacity(devices, usage, self.nv, self.cordon)
        self.memo: dict[object, object] = {}
        """Results for this node keyed by request shape (see :mod:`services.scheduler.fastpath`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """One node as the scheduler sees it: devices, per-device usage (aligned), node annotations."""

    name: NodeName
    devices: tuple[DeviceInfo, ...]
    usage: tuple[DeviceUsage, ...] = ()
    """Aligned with ``devices``; empty means every device is idle."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    derived: NodeFacts = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        usage = self.usage or tuple(IDLE for _ in self.devices)
        if len(usage) != len(self.devices):
            raise ValueError(f"node {self.name}: {len(usage)} usage entries for {len(self.devices)} devices")
        object.__setattr__(self, "usage", usage)
        object.__setattr__(self, "derived", NodeFacts(self.name, self.devices, usage, self.annotations))

    @classmethod
    def from_usage(
        cls,
        name: str,
        devices: Iterable[DeviceInfo],
        usage: Mapping[DeviceUUID, DeviceUsage],
        annotations: Mapping[str, str] | None = None,
    ) -> NodeState:
        devs = tuple(devices)
        return cls(
            name=NodeName(name),
            devices=devs,
            usage=tuple(usage.get(d.id, IDLE) for d in devs),
            annotations=dict(annotations or {}),
        )

    def usage_map(self) -> dict[DeviceUUID, DeviceUsage]:
        return {d.id: u for d, u in zip(self.devices, self.usage, strict=True)}

    def with_pod(self, devices: PodDevices, init_count: int = 0) -> NodeState:
        return NodeState.from_usage(
            self.name, self.devices, apply(self.usage_map(), devices, init_count), self.annotations
        )

    def without_pod(self, devices: PodDevices, init_count: int = 0) -> NodeState:
        return NodeState.from_usage(
            self.name, self.devices, release(self.usage_map(), devices, init_count), self.annotations
        )


def apply(
    usage: Mapping[DeviceUUID, DeviceUsage], devices: PodDevices, init_count: int = 0, sign: int = 1
) -> dict[DeviceUUID, DeviceUsage]:
    """Per-device usage with a pod's collapsed contribution added (``sign=-1`` subtracts, floored at 0)."""
    out = dict(usage)
    for uuid, add in ann.collapse_usage(devices, init_count).items():
        cur = out.get(uuid, IDLE)
        out[uuid] = DeviceUsage(
            used=max(cur.used + sign * add.used, 0),
            usedmem=max(cur.usedmem + sign * add.usedmem, 0),
            usedcores=max(cur.usedcores + sign * add.usedcores, 0),
            mig=cur.mig + add.mig if sign > 0 else _without(cur.mig, add.mig),
        )
    return out


def _without(held: tuple[MigPlacement, ...], gone: tuple[MigPlacement, ...]) -> tuple[MigPlacement, ...]:
    """``held`` minus each placement of ``gone`` once (a multiset difference)."""
    left = list(held)
    for placement in gone:
        if placement in left:
            left.remove(placement)
    return tuple(left)


def release(
    usage: Mapping[DeviceUUID, DeviceUsage], devices: PodDevices, init_count: int = 0
) -> dict[DeviceUUID, DeviceUsage]:
    """Per-device usage with a pod's collapsed contribution taken away."""
    return apply(usage, devices, init_count, sign=-1)


def release_collapsed(
    usage: Mapping[DeviceUUID, DeviceUsage], pods: Iterable[Mapping[DeviceUUID, DeviceUsage]]
) -> dict[DeviceUUID, DeviceUsage]:
    """Per-device usage with several pods taken away, each given as its collapsed contribution
    (``collapse_usage``, computed once by a caller that tries many sets of pods)."""
    out = dict(usage)
    for contribution in pods:
        for uuid, sub in contribution.items():
            cur = out.get(uuid, IDLE)
            out[uuid] = DeviceUsage(
                used=max(cur.used - sub.used, 0),
                usedmem=max(cur.usedmem - sub.usedmem, 0),
                usedcores=max(cur.usedcores - sub.usedcores, 0),
                mig=_without(cur.mig, sub.mig),
            )
    return out
