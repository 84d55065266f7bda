"""What the overview and a pending pod's page tell beyond counts (pure): top nodes and cards by
allocation and by use, the GPU type mix, slices held but idle, fragmentation, and for a pending
pod how long it has waited and which cluster events since its verdict may let it fit.

Works on the card totals :func:`services.dashboard.cards.all_cards` gives, never on every pod's
every slice, so an overview of 8000 cards stays cheap. Must not know HTTP or NATS.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from services.dashboard.cards import CardStats
from services.dashboard.view import ClusterView, PodState

Json = dict[str, Any]
TOP = 10


@dataclass(slots=True)
class NodeTotals:
    name: str
    mem_total: int = 0
    mem_alloc: int = 0
    mem_used: int = 0
    cores_total: int = 0
    cores_alloc: int = 0
    cores_used: float = 0.0
    cards: int = 0

    def json(self) -> Json:
        return {"name": self.name, "cards": self.cards, "mem_total": self.mem_total,
                "mem_alloc": self.mem_alloc, "mem_used": self.mem_used, "cores_total": self.cores_total,
                "cores_alloc": self.cores_alloc,
                "cores_used": round(self.cores_used, 1)}


def node_totals(view: ClusterView, cards: Iterable[CardStats]) -> dict[str, NodeTotals]:
    totals: dict[str, NodeTotals] = {}
    for s in cards:
        t = totals.get(s.node) or totals.setdefault(s.node, NodeTotals(name=s.node))
        t.cards += 1
        t.mem_total += s.device.devmem
        t.mem_alloc += s.mem_alloc
        t.mem_used += s.used_mib
        t.cores_total += s.device.devcore
        t.cores_alloc += s.cores_alloc
        t.cores_used += view.card_util.get(s.device.id, 0.0) * s.device.devcore
    return totals


def top_nodes(totals: dict[str, NodeTotals]) -> Json:
    """The ten nodes with the most memory allocated, and the ten with the most memory used."""
    rows = totals.values()
    return {"allocated": [t.json() for t in heapq.nlargest(TOP, rows, key=lambda t: (t.mem_alloc, t.name))
                          if t.mem_alloc],
            "used": [t.json() for t in heapq.nlargest(TOP, rows, key=lambda t: (t.mem_used, t.name))
                     if t.mem_used]}


def _keep(heap: list[tuple[Any, ...]], item: tuple[Any, ...]) -> None:
    """Keep the TOP largest items in a min-heap."""
    if len(heap) < TOP:
        heapq.heappush(heap, item)
    elif item > heap[0]:
        heapq.heapreplace(heap, item)


def summarize(view: ClusterView, cards: list[CardStats]) -> Json:
    """The overview's totals, node totals, type mix, fragmentation and top cards in one pass over
    the cards (8000 at 1000 nodes), keeping only each top ten while it goes."""
    nodes: dict[str, NodeTotals] = {}
    mix: dict[str, list[int]] = {}
    mem = [0, 0, 0]
    cores = [0, 0, 0.0]
    slots = given = unhealthy = stranded_mem = partly = partly_free = 0
    busiest: list[tuple[Any, ...]] = []
    fragmented: list[tuple[Any, ...]] = []
    top_used: list[tuple[Any, ...]] = []
    for i, s in enumerate(cards):
        d = s.device
        used_cores = view.card_util.get(d.id, 0.0) * d.devcore
        t = nodes.get(s.node) or nodes.setdefault(s.node, NodeTotals(name=s.node))
        t.cards += 1
        t.mem_total += d.devmem
        t.mem_alloc += s.mem_alloc
        t.mem_used += s.used_mib
        t.cores_total += d.devcore
        t.cores_alloc += s.cores_alloc
        t.cores_used += used_cores
        row = mix.get(d.type) or mix.setdefault(d.type, [0, 0, 0, 0])
        row[0] += 1
        row[1] += d.devmem
        row[2] += s.mem_alloc
        row[3] += s.used_mib
        mem[0], mem[1], mem[2] = mem[0] + d.devmem, mem[1] + s.mem_alloc, mem[2] + s.used_mib
        cores[0], cores[1], cores[2] = cores[0] + d.devcore, cores[1] + s.cores_alloc, cores[2] + used_cores
        slots, given, unhealthy = slots + d.count, given + s.count, unhealthy + (not s.healthy)
        if s.count:
            _keep(busiest, (s.busy, s.mem_alloc, i))
            stranded = s.stranded
            if stranded > 0:
                stranded_mem += round(stranded * d.devmem)
                _keep(fragmented, (stranded, s.count, i))
            if s.healthy and s.mem_alloc < d.devmem:
                partly, partly_free = partly + 1, partly_free + d.devmem - s.mem_alloc
        if s.used_mib:
            _keep(top_used, (s.used_mib, d.id, i))
    return {"nodes": nodes, "cards": len(cards), "unhealthy_cards": unhealthy,
            "memory": {"total": mem[0], "allocated": mem[1], "used": mem[2]},
            "cores": {"total": cores[0], "allocated": cores[1], "used": round(cores[2], 1)},
            "slices": {"total": slots, "allocated": given},
            "types": [{"type": k, "cards": n, "mem_total": m, "mem_alloc": a, "mem_used": u}
                      for k, (n, m, a, u) in sorted(mix.items(), key=lambda kv: (-kv[1][0], kv[0]))],
            "fragmentation": {"stranded_mem": stranded_mem, "partly_used_cards": partly,
                              "free_on_partly_used": partly_free},
            "busiest": [cards[i] for *_, i in sorted(busiest, reverse=True)],
            "fragmented": [cards[i] for *_, i in sorted(fragmented, reverse=True)],
            "top_used": [_used_row(view, cards[i]) for *_, i in sorted(top_used, reverse=True)]}


def _used_row(view: ClusterView, s: CardStats) -> Json:
    return {"uuid": s.device.id, "node": s.node, "type": s.device.type, "devmem": s.device.devmem,
            "mem_alloc": s.mem_alloc, "used": s.used_mib, "cores_alloc": s.cores_alloc,
            "cores_used": round(100.0 * view.card_util.get(s.device.id, 0.0), 1), "pods": s.count}


def idle(view: ClusterView, *, now: float, after_s: float, limit: int = 20) -> Json:
    """Slices held by pods whose SM use stayed under the idle threshold for ``after_s`` or more:
    their count and totals, and the ``limit`` holding the most memory (rows built only for those)."""
    count = mem = cores = 0
    top: list[tuple[int, str, str, int, int, str, str, float]] = []
    for uid, use in view.usage.items():
        since = use.idle_since
        if not since:
            continue
        key = view.by_uid.get(uid)
        pod = view.pods.get(key) if key is not None else None
        if pod is None or pod.allocation is None or now - since < after_s:
            continue
        for container, slot in zip(pod.allocation.containers, pod.allocation.devices, strict=False):
            for d in slot:
                count, mem, cores = count + 1, mem + d.usedmem, cores + d.usedcores
                row = (d.usedmem, uid, container, d.usedcores, d.idx, d.uuid, pod.allocation.node, since)
                if len(top) < limit:
                    heapq.heappush(top, row)
                elif row > top[0]:
                    heapq.heapreplace(top, row)
    rows = []
    for used_mem, uid, container, used_cores, _, uuid, node, since in sorted(top, reverse=True):
        pod = view.pods[view.by_uid[uid]]
        used = view.usage[uid].used.get((container, uuid), 0) >> 20
        rows.append({"pod": f"{pod.namespace}/{pod.name}", "container": container, "uuid": uuid, "node": node,
                     "mem": used_mem, "cores": used_cores, "used": used, "idle_s": round(now - since)})
    return {"count": count, "mem": mem, "cores": cores, "slices": rows, "after_s": after_s}


def waiting(pod: PodState, view: ClusterView, now: float) -> Json:
    """A pending pod's diagnosis: how long it waited, its newest reasons per node, and the cluster
    events since that verdict that may let it fit (capacity freed, a card recovered or added)."""
    since = pod.reasons_at or pod.created_at
    nodes = set(pod.reasons)
    unblocking = [{"ts": u.ts, "kind": u.kind, "node": u.node, "text": u.text}
                  for u in reversed(view.unblocking) if u.ts > since and (not nodes or u.node in nodes
                                                                         or u.kind == "inventory.snapshot")]
    return {"waited_s": max(0.0, now - pod.created_at) if pod.created_at else None,
            "verdict_age_s": max(0.0, now - pod.reasons_at) if pod.reasons_at else None,
            "unblocking": unblocking[:20]}
