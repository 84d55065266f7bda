"""The data of each dashboard page, built from a view and the feed as plain JSON values (pure).

``page(view, feed, path, query, now)`` is the one entry: it reads the path (``/``, ``/nodes``,
``/nodes/<node>``, ``/cards/<uuid>``, ``/pods``, ``/pods/<ns>/<name>``, ``/events``) and raises
:class:`NotFound` for a node, card, pod or page the view does not hold (a finished pod is held
for its retention). Lists are paged so a 1000-node cluster never sends every card at once;
charts come from the trends cut at ``now`` (the moment looked at). Must not know HTTP or NATS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.dashboard import insights
from services.dashboard.cards import CardStats, SliceView, all_cards, card_stats, find_card
from services.dashboard.errors import BadQuery, NotFound
from services.dashboard.feed import Feed, FeedEntry, FeedFilter
from services.dashboard.trends import Range, Scope, Trends, series_json
from services.dashboard.view import CLUSTER_WIDE, NO_USE, ClusterView, FinishedPod, NodeState, Phase, PodState

Json = dict[str, Any]
PAGE_SIZE = 50
"""Nodes (or pods) per page."""
TOP = 10
"""Cards in the busiest and most fragmented lists."""
FEED_LIMIT = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class PageOptions:
    pending_forget_s: float = 600.0
    """A Pending pod with no event for this long is no longer shown (deleted before it was placed)."""
    stale_heartbeats: float = 3.0
    """A node whose inventory is older than this many heartbeats is shown as stale."""
    idle_after_s: float = 600.0
    """A slice whose pod stayed under the idle SM threshold this long is held but idle."""


FINISHED = "Finished"
"""The pods page's phase filter for pods whose slices were released (kept for their retention)."""


def page(view: ClusterView, feed: Feed | None, path: str, query: Mapping[str, str], *, now: float,
         options: PageOptions = PageOptions(), trends: Trends | None = None) -> Json:
    """The JSON of one page; NotFound/BadQuery for a path or parameter that names nothing."""
    parts = [p for p in path.split("/") if p]
    builder = _ROUTES.get((parts[0] if parts else "", len(parts)))
    if builder is None:
        raise NotFound(f"no page {path!r}")
    body = builder(_Ctx(view=view, feed=feed, parts=parts, query=query, now=now, options=options,
                        trends=trends))
    return {"path": path, **body}


def status(view: ClusterView) -> Json:
    """Where the view stands in the stream: changes with every event, so it is pushed apart from
    the page (which is pushed again only when its own content changed)."""
    return {"at": view.at, "seq": view.seq, "events": view.applied, "undecodable": view.undecodable}


def known(view: ClusterView, path: str) -> bool:
    """Whether ``path`` names something the view holds (the HTML 404 check, without building the page)."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return True
    if parts[0] == "nodes" and len(parts) == 2:
        return parts[1] in view.nodes
    if parts[0] == "cards" and len(parts) == 2:
        return any(d.id == parts[1] for n in view.nodes.values() for d in n.devices)
    if parts[0] == "pods" and len(parts) == 3:
        return (parts[1], parts[2]) in view.pods or (parts[1], parts[2]) in view.finished
    return (parts[0], len(parts)) in _ROUTES


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ctx:
    view: ClusterView
    feed: Feed | None
    parts: list[str]
    query: Mapping[str, str]
    now: float
    options: PageOptions
    trends: Trends | None = None

    def range(self) -> Range:
        raw = self.query.get("range", "") or Range.HOUR.value
        try:
            return Range(raw)
        except ValueError:
            raise BadQuery(f"range {raw!r}: expected one of {', '.join(r.value for r in Range)}") from None

    def chart(self, scope: Scope, key: str) -> Json | None:
        if self.trends is None:
            return None
        return series_json(self.trends.series(scope, key, self.range(), self.now))

    def offset(self) -> int:
        raw = self.query.get("page", "0") or "0"
        if not raw.isdigit():
            raise BadQuery(f"page {raw!r}: expected a page number (0, 1, ...)")
        return int(raw) * PAGE_SIZE

    def shown(self, pod: PodState) -> bool:
        return pod.phase != Phase.PENDING or self.now - pod.updated_at <= self.options.pending_forget_s

    def kept(self, pod: FinishedPod) -> bool:
        return self.now - pod.ended_at <= self.view.finished_retention_s

    def stale(self, node: NodeState) -> bool:
        return self.now - node.seen_at > node.heartbeat_s * self.options.stale_heartbeats


def _overview(c: _Ctx) -> Json:
    counts = dict.fromkeys(Phase, 0)
    for pod in c.view.pods.values():
        if c.shown(pod):
            counts[pod.phase] += 1
    summary = insights.summarize(c.view, all_cards(c.view))
    return {"page": "overview", "range": c.range().value, "chart": c.chart(Scope.CLUSTER, CLUSTER_WIDE),
            "nodes": len(c.view.nodes), "stale_nodes": sum(c.stale(n) for n in c.view.nodes.values()),
            **{k: summary[k] for k in ("cards", "unhealthy_cards", "memory", "cores", "slices", "types",
                                       "fragmentation", "top_used")},
            "pods": {p.value: n for p, n in counts.items()},
            "finished": sum(1 for f in c.view.finished.values() if c.kept(f)),
            "top_nodes": insights.top_nodes(summary["nodes"]),
            "idle": insights.idle(c.view, now=c.now, after_s=c.options.idle_after_s),
            "busiest": [_card_row(s) for s in summary["busiest"]],
            "fragmented": [_card_row(s) for s in summary["fragmented"]]}


def _nodes(c: _Ctx) -> Json:
    needle = c.query.get("q", "")
    names = sorted(n for n in c.view.nodes if needle in n)
    offset = c.offset()
    return {"page": "nodes", "total": len(names), "offset": offset, "page_size": PAGE_SIZE, "q": needle,
            "nodes": [_node(c, c.view.nodes[n]) for n in names[offset:offset + PAGE_SIZE]]}


def _node_page(c: _Ctx) -> Json:
    node = c.view.nodes.get(c.parts[1])
    if node is None:
        raise NotFound(f"no node {c.parts[1]!r}")
    totals = insights.node_totals(c.view, (card_stats(c.view, node, d) for d in node.devices))
    return {"page": "node", "node": _node(c, node), "range": c.range().value,
            "totals": totals.get(node.name, insights.NodeTotals(name=node.name)).json(),
            "chart": c.chart(Scope.NODE, node.name)}


def _card_page(c: _Ctx) -> Json:
    stats = find_card(c.view, c.parts[1])
    if stats is None:
        raise NotFound(f"no card {c.parts[1]!r}")
    return {"page": "card", "card": {**_card(stats), "cores_used": round(100 * c.view.card_util.get(
        stats.device.id, 0.0), 1)}, "chart": c.chart(Scope.CARD, stats.device.id),
            "history": [{"ts": e.ts, "kind": e.kind, "text": e.text}
                        for e in reversed(c.view.history.get(stats.device.id, ()))],
            "series": [{"ts": p.ts, "used": p.used_mib} for p in c.view.series.get(stats.device.id, ())]}


def _pods(c: _Ctx) -> Json:
    needle, phase = c.query.get("q", ""), c.query.get("phase", "")
    phases = [p.value for p in Phase] + [FINISHED]
    if phase and phase not in phases:
        raise BadQuery(f"phase {phase!r}: expected one of {', '.join(phases)}")
    offset = c.offset()
    if phase == FINISHED:
        kept = (f for f in c.view.finished.values() if c.kept(f) and needle in f"{f.namespace}/{f.name}")
        done = sorted(kept, key=lambda f: (-f.ended_at, f.key))
        rows = [_finished(f) for f in done[offset:offset + PAGE_SIZE]]
        total = len(done)
    else:
        pods = sorted((p for p in c.view.pods.values() if c.shown(p) and needle in f"{p.namespace}/{p.name}"
                       and (not phase or p.phase.value == phase)), key=lambda p: p.key)
        rows = [_pod(c, p) for p in pods[offset:offset + PAGE_SIZE]]
        total = len(pods)
    return {"page": "pods", "total": total, "offset": offset, "page_size": PAGE_SIZE, "q": needle,
            "phase": phase, "phases": phases, "pods": rows}


def _pod_page(c: _Ctx) -> Json:
    key = (c.parts[1], c.parts[2])
    pod = c.view.pods.get(key)
    if pod is not None:
        body = _pod(c, pod)
        if pod.phase is Phase.PENDING:
            body["waiting"] = insights.waiting(pod, c.view, c.now)
        return {"page": "pod", "pod": body}
    done = c.view.finished.get(key)
    if done is None or not c.kept(done):
        raise NotFound(f"no GPU pod {c.parts[1]}/{c.parts[2]}")
    return {"page": "pod", "pod": _finished(done)}


def _events(c: _Ctx) -> Json:
    q = c.query
    selector = FeedFilter(node=q.get("node", ""), pod=q.get("pod", ""), kind=q.get("kind", ""),
                          card=q.get("card", ""), subject=q.get("subject", ""),
                          heartbeats=q.get("heartbeats", "") in ("1", "on", "true"))
    entries = c.feed.newest(selector, FEED_LIMIT) if c.feed is not None else []
    return {"page": "events", "filter": {"node": selector.node, "pod": selector.pod, "kind": selector.kind,
                                         "card": selector.card, "subject": selector.subject,
                                         "heartbeats": selector.heartbeats},
            "entries": [_entry(e) for e in entries]}


def _node(c: _Ctx, node: NodeState) -> Json:
    return {"name": node.name, "stale": c.stale(node), "seen_at": node.seen_at, "generation": node.generation,
            "cards": [_card(card_stats(c.view, node, d)) for d in node.devices]}


def _card(s: CardStats) -> Json:
    d = s.device
    return {"uuid": d.id, "node": s.node, "index": d.index, "type": d.type, "numa": d.numa, "mode": d.mode,
            "healthy": s.healthy, "health_reason": s.health_reason, "devmem": d.devmem, "devcore": d.devcore,
            "count": d.count, "mem_alloc": s.mem_alloc, "cores_alloc": s.cores_alloc, "used": s.used_mib,
            "stranded": round(s.stranded, 3), "slices": [_slice(x) for x in s.slices]}


def _card_row(s: CardStats) -> Json:
    return {"uuid": s.device.id, "node": s.node, "type": s.device.type, "busy": round(s.busy, 3),
            "stranded": round(s.stranded, 3), "devmem": s.device.devmem, "mem_alloc": s.mem_alloc,
            "cores_alloc": s.cores_alloc, "pods": s.count}


def _slice(x: SliceView) -> Json:
    return {"pod": f"{x.namespace}/{x.name}", "container": x.container, "mem": x.mem, "cores": x.cores,
            "used": x.used_mib, "phase": x.phase}


def _pod(c: _Ctx, p: PodState) -> Json:
    a = p.allocation
    use = c.view.usage.get(p.uid, NO_USE)
    used = use.used
    cards: list[Json] = [] if a is None else [
        {"uuid": d.uuid, "container": name, "mem": d.usedmem, "cores": d.usedcores,
         "used": used.get((name, d.uuid), 0) >> 20}
        for name, slot in zip(a.containers, a.devices, strict=False) for d in slot]
    for card in cards:
        card["sm"] = round(100 * use.util.get((card["container"], card["uuid"]), 0.0), 1)
    return {"namespace": p.namespace, "name": p.name, "uid": p.uid, "phase": p.phase.value,
            "node": a.node if a is not None else "", "cards": cards, "limits": _limits(p.requests),
            "reasons": [{"node": n, "reason": r} for n, r in sorted(p.reasons.items())],
            "reasons_at": p.reasons_at, "failure": p.failure, "updated_at": p.updated_at,
            "created_at": p.created_at, "over_limit_at": c.view.over_limit.get(p.uid, 0.0)}


def _limits(requests: tuple[Any, ...]) -> list[Json | None]:
    return [None if r is None else {"gpus": r.nums, "mem": r.memreq, "mem_percent": r.mempercentagereq,
                                    "cores": r.coresreq} for r in requests]


def _finished(f: FinishedPod) -> Json:
    """A finished pod: what it was given, where, the most it used, how long it ran, why it ended."""
    a = f.allocation
    cards = [{"uuid": d.uuid, "container": name, "mem": d.usedmem, "cores": d.usedcores,
              "used": f.peak.get((name, d.uuid), (0, 0.0))[0] >> 20,
              "sm": round(100 * f.peak.get((name, d.uuid), (0, 0.0))[1], 1)}
             for name, slot in zip(a.containers, a.devices, strict=False) for d in slot]
    return {"namespace": f.namespace, "name": f.name, "uid": f.uid, "phase": FINISHED, "node": a.node,
            "cards": cards, "limits": _limits(f.requests), "reasons": [], "reasons_at": 0.0, "failure": "",
            "created_at": f.created_at, "placed_at": f.placed_at, "ended_at": f.ended_at,
            "ran_s": round(max(0.0, f.ended_at - f.placed_at), 1), "why": f.why, "updated_at": f.ended_at,
            "over_limit_at": 0.0}


def _entry(e: FeedEntry) -> Json:
    return {"seq": e.seq, "ts": e.ts, "kind": e.kind, "node": e.node, "pods": list(e.pods), "line": e.line,
            "subject": e.subject, "undecodable": e.undecodable}


_ROUTES = {("", 0): _overview, ("nodes", 1): _nodes, ("nodes", 2): _node_page, ("cards", 2): _card_page,
           ("pods", 1): _pods, ("pods", 3): _pod_page, ("events", 1): _events}
