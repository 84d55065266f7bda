"""The live event feed: the newest events as ``gpubus tap`` prints them, filterable (pure, no I/O).

Each entry keeps the line :func:`shared.event_text.render_line` makes, with the node, pods and kind
it can be filtered by. A message that is no event is an entry too, marked undecodable with its
subject, size and reason: shown, never dropped. Must not know NATS or HTTP.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from shared.event_text import pods_of, render_line
from shared.events import Event

UNDECODABLE = "undecodable"


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedEntry:
    seq: int
    ts: float
    kind: str
    node: str
    pods: tuple[str, ...]
    """``namespace/name`` of every pod the event concerns."""
    line: str

    @property
    def undecodable(self) -> bool:
        return self.kind == UNDECODABLE


def entry_for(event: Event, seq: int) -> FeedEntry:
    pods = tuple(sorted(f"{ns}/{name}" for ns, name in pods_of(event)))
    return FeedEntry(seq=seq, ts=event.ts, kind=event.KIND, node=event.node, pods=pods,
                     line=render_line(event))


def undecodable_entry(subject: str, size: int, reason: str, seq: int, at: float) -> FeedEntry:
    node = subject.rsplit(".", 1)[-1] if subject.count(".") >= 3 else ""  # gpubus.<family>.<verb>.<node>
    return FeedEntry(seq=seq, ts=at, kind=UNDECODABLE, node=node, pods=(),
                     line=f"UNDECODABLE {subject} ({size} bytes): {reason}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedFilter:
    """Node (exact), pod (``namespace/name`` or a part of it) and kind (a prefix, ``allocation``)."""

    node: str = ""
    pod: str = ""
    kind: str = ""

    def matches(self, entry: FeedEntry) -> bool:
        if self.node and entry.node != self.node:
            return False
        if self.pod and not any(self.pod in p for p in entry.pods):
            return False
        return not self.kind or entry.kind.startswith(self.kind)


class Feed:
    """The newest ``size`` entries, oldest first."""

    def __init__(self, size: int) -> None:
        self._entries: deque[FeedEntry] = deque(maxlen=size)

    def add(self, entry: FeedEntry) -> None:
        self._entries.append(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[FeedEntry]:
        return iter(self._entries)

    def newest(self, selector: FeedFilter, limit: int) -> list[FeedEntry]:
        """Up to ``limit`` matching entries, newest first."""
        found: list[FeedEntry] = []
        for entry in reversed(self._entries):
            if selector.matches(entry):
                found.append(entry)
                if len(found) >= limit:
                    break
        return found
