"""The live event feed: the newest events as ``gpubus tap`` prints them, filterable (pure, no I/O).

Each entry keeps the line :func:`shared.event_text.render_line` makes, with the node, pods and kind
it can be filtered by. A message that is no event is an entry too, marked undecodable with its
subject, size and reason: shown, never dropped. Must not know NATS or HTTP.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from shared.event_text import pods_of, render_line
from shared.events import (
    AllocationApplied,
    AllocationDecided,
    DeviceHealth,
    Event,
    Inventory,
    Usage,
    UsageOverLimit,
    subject_for,
)

UNDECODABLE = "undecodable"
HEARTBEATS = frozenset({Inventory.KIND, Usage.KIND})
"""Kinds every node sends on a timer: hidden from the events page unless asked for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedEntry:
    seq: int
    ts: float
    kind: str
    node: str
    pods: tuple[str, ...]
    """``namespace/name`` of every pod the event concerns."""
    line: str
    subject: str = ""
    cards: tuple[str, ...] = ()
    """Card UUIDs (or device IDs) the event names."""

    @property
    def undecodable(self) -> bool:
        return self.kind == UNDECODABLE


def entry_for(event: Event, seq: int, subject: str = "") -> FeedEntry:
    pods = tuple(sorted(f"{ns}/{name}" for ns, name in pods_of(event)))
    return FeedEntry(seq=seq, ts=event.ts, kind=event.KIND, node=event.node, pods=pods,
                     line=render_line(event), subject=subject or subject_for(event), cards=cards_of(event))


def cards_of(event: Event) -> tuple[str, ...]:
    """Every card an event names (allocation devices, a health change, usage samples)."""
    found: set[str]
    if isinstance(event, AllocationDecided):
        found = {str(d.uuid) for slot in event.allocation.devices for d in slot}
    elif isinstance(event, DeviceHealth | UsageOverLimit):
        found = {event.uuid}
    elif isinstance(event, AllocationApplied):
        found = set(event.device_ids)
    elif isinstance(event, Usage):
        found = {d.uuid for c in event.containers for d in c.devices} | {h.uuid for h in event.host}
    elif isinstance(event, Inventory):
        found = {str(d.id) for d in event.devices}
    else:
        found = set()
    return tuple(sorted(found))


def undecodable_entry(subject: str, size: int, reason: str, seq: int, at: float) -> FeedEntry:
    node = subject.rsplit(".", 1)[-1] if subject.count(".") >= 3 else ""  # gpubus.<family>.<verb>.<node>
    return FeedEntry(seq=seq, ts=at, kind=UNDECODABLE, node=node, pods=(), subject=subject,
                     line=f"UNDECODABLE {subject} ({size} bytes): {reason}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedFilter:
    """Node (exact), pod (``namespace/name`` or a part of it), card (a part of its UUID), subject
    (a part of it), kind (a prefix, ``allocation``); heartbeats only when asked for."""

    node: str = ""
    pod: str = ""
    kind: str = ""
    card: str = ""
    subject: str = ""
    heartbeats: bool = False

    def matches(self, entry: FeedEntry) -> bool:
        if not self.heartbeats and entry.kind in HEARTBEATS:
            return False
        if self.node and entry.node != self.node:
            return False
        if self.pod and not any(self.pod in p for p in entry.pods):
            return False
        if self.card and not any(self.card in c for c in entry.cards):
            return False
        if self.subject and self.subject not in entry.subject:
            return False
        return not self.kind or entry.kind.startswith(self.kind)


class Feed:
    """The newest ``size`` entries of each sort, oldest first: heartbeats apart, so a busy cluster's
    samples (a 1000-node cluster sends dozens a second) never push the placements out of the feed."""

    def __init__(self, size: int) -> None:
        self._entries: deque[FeedEntry] = deque(maxlen=size)
        self._beats: deque[FeedEntry] = deque(maxlen=size)

    def add(self, entry: FeedEntry) -> None:
        (self._beats if entry.kind in HEARTBEATS else self._entries).append(entry)

    def __len__(self) -> int:
        return len(self._entries) + len(self._beats)

    def __iter__(self) -> Iterator[FeedEntry]:
        return iter(sorted((*self._entries, *self._beats), key=lambda e: e.seq))

    def newest(self, selector: FeedFilter, limit: int) -> list[FeedEntry]:
        """Up to ``limit`` matching entries, newest first."""
        sources = (reversed(self._entries), reversed(self._beats)) if selector.heartbeats else (
            reversed(self._entries),)
        found: list[FeedEntry] = []
        for entry in heapq.merge(*sources, key=lambda e: -e.seq):
            if selector.matches(entry):
                found.append(entry)
                if len(found) >= limit:
                    break
        return found
