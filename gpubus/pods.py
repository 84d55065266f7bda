"""Pure pieces of ``gpubus submit`` / ``gpubus get pods``: pod manifests, phase tracking, tables.

No I/O: manifests in, pod dicts out; watch events in, a progress/summary view out.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from shared.annotations import DEVICES_ALLOCATED, decode_pod_devices
from shared.errors import BadInput

Pod = dict[str, Any]
STARTED = frozenset({"Running", "Succeeded"})
DONE = frozenset({"Running", "Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodCopies:
    """Every Pod of a manifest ``count`` times; each copy is made as it is taken, so a large
    ``--count`` costs memory for the pods in flight, not for all of them before the first is sent."""

    templates: tuple[Pod, ...]
    count: int

    def __len__(self) -> int:
        return len(self.templates) * self.count

    def __iter__(self) -> Iterator[Pod]:
        for template in self.templates:
            for _ in range(self.count):
                pod = copy.deepcopy(template)
                if self.count > 1 and pod["metadata"].get("name"):
                    pod["metadata"]["generateName"] = pod["metadata"].pop("name") + "-"
                yield pod


def pods_from_documents(docs: list[Any], count: int) -> PodCopies:
    """Every Pod document ``count`` times; with count > 1 names become ``generateName`` prefixes."""
    if count < 1:
        raise BadInput("--count must be at least 1")
    templates: list[Pod] = []
    for i, raw in enumerate(d for d in docs if d is not None):
        kind = raw.get("kind", "Pod") if isinstance(raw, dict) else type(raw).__name__
        if kind != "Pod":
            raise BadInput(f"document {i + 1} is not a Pod (kind {kind})")
        doc = {"apiVersion": "v1", "kind": "Pod", **raw}
        meta = doc.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise BadInput(f"document {i + 1}: metadata must be a mapping")
        if not meta.get("name") and not meta.get("generateName"):
            raise BadInput(f"document {i + 1}: metadata.name or metadata.generateName is required")
        templates.append(doc)
    if not templates:
        raise BadInput("no Pod in the file")
    return PodCopies(tuple(templates), count)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def pending_reason(pod: Pod) -> str:
    """Why a pod is not running yet: the PodScheduled=False message, else the status reason."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    return str(status.get("message") or status.get("reason") or "")


@dataclass(slots=True)
class Tracked:
    submitted_at: float
    phase: str = "Pending"
    running_at: float | None = None
    reason: str = ""
    unschedulable: bool = False


@dataclass(slots=True)
class PodTracker:
    """Phases of the pods we created, from watch events; submit->Running latency per pod."""

    pods: dict[str, Tracked] = field(default_factory=dict)
    early: dict[str, Pod] = field(default_factory=dict)
    """Events that arrived before create() returned the pod's uid."""

    def submitted(self, uid: str, at: float) -> None:
        self.pods[uid] = Tracked(submitted_at=at)
        if uid in self.early:
            self.observe(self.early.pop(uid), at)

    def observe(self, pod: Pod, now: float | None = None) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        tracked = self.pods.get(uid)
        if tracked is None:
            self.early[uid] = pod
            return
        now = time.time() if now is None else now
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in STARTED and tracked.running_at is None:
            tracked.running_at = max(now, tracked.submitted_at)
        tracked.phase = phase
        tracked.reason = pending_reason(pod)
        if phase == "Pending" and tracked.reason.startswith("Unschedulable"):
            tracked.unschedulable = True

    def deleted(self, uid: str) -> None:
        if uid in self.pods:
            self.pods[uid].phase = "Deleted"

    def settled(self) -> bool:
        """Every pod started, failed, gone, or found unschedulable at least once."""
        return all(t.phase in DONE or t.phase == "Deleted" or t.unschedulable for t in self.pods.values())

    def counts(self) -> Counter[str]:
        return Counter(t.phase for t in self.pods.values())

    def latencies(self) -> list[float]:
        return [t.running_at - t.submitted_at for t in self.pods.values() if t.running_at is not None]

    def progress(self, total: int) -> str:
        c = self.counts()
        return (f"submitted {len(self.pods)}/{total}  pending {c['Pending']}  running {c['Running']}  "
                f"succeeded {c['Succeeded']}  failed {c['Failed']}")

    def summary(self) -> list[str]:
        c, lat = self.counts(), self.latencies()
        lines = ["  ".join(f"{phase} {n}" for phase, n in sorted(c.items()))]
        if lat:
            lines.append(f"submit->Running  p50 {percentile(lat, 50) * 1000:.0f} ms  "
                         f"p99 {percentile(lat, 99) * 1000:.0f} ms  max {max(lat) * 1000:.0f} ms")
        reasons = Counter(t.reason or "(no reason yet)" for t in self.pods.values()
                          if t.phase in ("Pending", "Failed"))
        lines += [f"  {n} x {reason}" for reason, n in reasons.most_common(5)]
        return lines


# -- get pods ------------------------------------------------------------------------------------

def _age(created: str | None, now: float) -> str:
    if not created:
        return "?"
    try:
        then = dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return "?"
    s = max(0, int(now - then))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def gpu_column(pod: Pod, *, wide: bool) -> str:
    """``hami.io/vgpu-devices-allocated`` as ``GPU-1234…:3000MiB/30%`` per card, ``;`` per container."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICES_ALLOCATED)
    if not value:
        return "-"
    try:
        slots = decode_pod_devices(value)
    except (BadInput, ValueError):
        return "?"
    def card(uuid: str, mem: int, cores: int) -> str:
        return f"{uuid if wide else uuid[:12]}:{mem}MiB/{cores}%"
    text = ";".join(",".join(card(d.uuid, d.usedmem, d.usedcores) for d in slot) for slot in slots if slot)
    return text or "-"


def status_column(pod: Pod) -> str:
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    return str(status.get("reason") if status.get("phase") == "Failed" and status.get("reason")
               else status.get("phase", "Pending"))


def pod_rows(pods: list[Pod], *, wide: bool, all_namespaces: bool,
             now: float | None = None) -> list[list[str]]:
    now = time.time() if now is None else now
    head = (["NAMESPACE"] if all_namespaces else []) + ["NAME", "STATUS", "NODE", "GPU", "AGE"]
    if wide:
        head.append("REASON")
    rows = [head]
    def key(p: Pod) -> tuple[str, str]:
        return p["metadata"].get("namespace", ""), p["metadata"].get("name", "")
    for pod in sorted(pods, key=key):
        meta = pod.get("metadata") or {}
        row = ([meta.get("namespace", "")] if all_namespaces else []) + [
            meta.get("name", ""), status_column(pod), (pod.get("spec") or {}).get("nodeName") or "<none>",
            gpu_column(pod, wide=wide), _age(meta.get("creationTimestamp"), now)]
        if wide:
            row.append(pending_reason(pod)[:120] or "-")
        rows.append(row)
    return rows


def render_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ("   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)
    return "\n".join(lines)
