"""What one card carries: its slices, what they hold and use, and how much of it is stranded (pure).

A card's bar is its slices (pod, container, MiB and cores given, MiB used by the newest usage
sample). "Stranded" capacity is what no new pod can use: memory left on a card with no cores or
slots left, or cores left with no memory; the most fragmented cards have the most of it.
Must not know NATS, HTTP or how a card is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.dashboard.view import NO_USE, ClusterView, NodeState, PodState, pods_on
from shared.model import DeviceInfo

_MIB = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class SliceView:
    namespace: str
    name: str
    container: str
    mem: int
    cores: int
    used_mib: int
    phase: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CardStats:
    node: str
    device: DeviceInfo
    healthy: bool
    health_reason: str
    slices: tuple[SliceView, ...] = ()
    """Empty in a summary (:func:`all_cards`), which carries only the totals below."""
    mem_alloc: int
    cores_alloc: int
    used_mib: int
    count: int
    """Slices given out."""

    @property
    def busy(self) -> float:
        """The larger of its memory and cores given out, 0..1."""
        d = self.device
        mem = self.mem_alloc / d.devmem if d.devmem else 0.0
        return max(mem, self.cores_alloc / d.devcore if d.devcore else 0.0)

    @property
    def stranded(self) -> float:
        """Share of the card no new pod can use (0..1): see the module docstring."""
        d = self.device
        free_mem, free_cores = max(0, d.devmem - self.mem_alloc), max(0, d.devcore - self.cores_alloc)
        if not self.count or not self.healthy:
            return 0.0
        if free_cores == 0 or self.count >= d.count:
            return free_mem / d.devmem if d.devmem else 0.0
        if free_mem == 0:
            return free_cores / d.devcore if d.devcore else 0.0
        return 0.0


def card_stats(view: ClusterView, node: NodeState, device: DeviceInfo) -> CardStats:
    healthy, reason = view.health.get(device.id, (device.health, ""))
    slices = tuple(s for pod in pods_on(view, device.id) for s in _slices(view, pod, device.id))
    return CardStats(node=node.name, device=device, healthy=healthy, health_reason=reason, slices=slices,
                     mem_alloc=sum(s.mem for s in slices), cores_alloc=sum(s.cores for s in slices),
                     used_mib=sum(s.used_mib for s in slices), count=len(slices))


def all_cards(view: ClusterView) -> list[CardStats]:
    """Every card's totals without its slices, from the view's running totals (the overview of
    8000 cards never walks the 24,000 pods on them)."""
    cards = []
    for node in view.nodes.values():
        for d in node.devices:
            mem, cores, count = view.given.get(d.id, (0, 0, 0))
            used_bytes = view.used.get(d.id, 0)
            healthy, reason = view.health.get(d.id, (d.health, ""))
            cards.append(CardStats(node=node.name, device=d, healthy=healthy, health_reason=reason,
                                   mem_alloc=mem, cores_alloc=cores, used_mib=used_bytes // _MIB,
                                   count=count))
    return cards


def find_card(view: ClusterView, uuid: str) -> CardStats | None:
    for node in view.nodes.values():
        for d in node.devices:
            if d.id == uuid:
                return card_stats(view, node, d)
    return None


def _slices(view: ClusterView, pod: PodState, uuid: str) -> list[SliceView]:
    assert pod.allocation is not None
    used = view.usage.get(pod.uid, NO_USE).used
    a = pod.allocation
    out = []
    for container, slot in zip(a.containers, a.devices, strict=False):
        for d in slot:
            if d.uuid == uuid:
                out.append(SliceView(namespace=pod.namespace, name=pod.name, container=container,
                                     mem=d.usedmem, cores=d.usedcores,
                                     used_mib=used.get((container, uuid), 0) // _MIB, phase=pod.phase.value))
    return out
