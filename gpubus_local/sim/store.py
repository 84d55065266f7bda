"""The simulated API server's storage: objects, the global resourceVersion, history and watchers.

Objects are plain JSON dicts that are never mutated once stored (writers build a new dict, sharing
unchanged subtrees), so lists and watch events can hand out references without copying. Every
write takes the next value of one global, monotonically increasing resourceVersion, appends a
``Change`` to a bounded history (what makes ``watch?resourceVersion=N`` resumable, and 410 once N
has been compacted away) and fans the change out synchronously to matching watchers. Watchers
have bounded buffers; one that falls too far behind is closed, as the real cacher does, and its
client re-watches from the last rv it saw. Each change is serialised once, whatever the number of
watchers. Pod watchers with a ``spec.nodeName=`` field selector are indexed by node (and the
others kept apart), so a pod event reaches only its node's watchers and the unindexed ones:
100 kubelets neither test nor are tested against every pod event.

Events expire as with the API server's ``--event-ttl`` (1 hour; every write of an event renews it,
as its etcd lease does), and past ``event_limit`` live events the least recently written go first:
each expiry is a DELETED change like any delete. Live events are kept in last-write order, so both
rules only ever look at the front of that order: a write or read costs O(1) amortised, never a scan.

A write with ``dry_run`` (the real ``DryRunnableStorage``) makes the same checks — the name is free,
the resourceVersion matches, the object exists — and answers what it would have stored (``dryrun``),
but changes nothing: no object, no resourceVersion taken, no history, no watch event.

No HTTP here: the server layer parses requests and renders responses.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpubus_local.sim import dryrun
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.kinds import KINDS
from gpubus_local.sim.selectors import Matcher, field_value, parse_field_selector, parse_label_selector

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

_NODE_PATH = ("spec", "nodeName")


@dataclass(slots=True)
class Change:
    """One write: the stored object after it (``old`` before it, for MODIFIED and DELETED)."""

    rv: int
    resource: str
    type: str
    obj: Obj
    old: Obj | None
    _line: bytes | None = None

    def line(self) -> bytes:
        if self._line is None:
            self._line = orjson.dumps({"type": self.type, "object": self.obj}) + b"\n"
        return self._line


def event_line(kind: str, obj: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


@dataclass(eq=False, slots=True)
class Watcher:
    """One open watch: a selector, a bounded buffer of serialised lines, and a wake-up event."""

    resource: str
    namespace: str | None
    fields: Matcher
    labels: Matcher
    node: str | None
    limit: int
    lines: deque[bytes] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    sent_rv: int = 0

    def matches(self, obj: Obj) -> bool:
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.fields(obj) and self.labels(obj)

    def push(self, line: bytes, rv: int) -> None:
        if self.closed:
            return
        if len(self.lines) >= self.limit:
            self.close()  # too slow: the client re-watches from the last rv it received
            return
        self.lines.append(line)
        self.sent_rv = rv
        self.ready.set()

    def offer(self, change: Change) -> None:
        """Deliver ``change`` as this watcher sees it: moving in or out of the selector is ADDED/DELETED."""
        now = self.matches(change.obj)
        before = change.old is not None and change.type == "MODIFIED" and self.matches(change.old)
        if now and (before or change.type != "MODIFIED"):
            self.push(change.line(), change.rv)
        elif now:
            self.push(event_line("ADDED", change.obj), change.rv)
        elif before and change.old is not None:
            gone = {**change.old, "metadata": {**change.old["metadata"], "resourceVersion": str(change.rv)}}
            self.push(event_line("DELETED", gone), change.rv)

    def close(self) -> None:
        self.closed = True
        self.ready.set()

    def drain(self) -> list[bytes]:
        batch = list(self.lines)
        self.lines.clear()
        self.ready.clear()
        return batch


class Store:
    """All objects of the simulated cluster, by resource then (namespace, name)."""

    def __init__(
        self,
        *,
        history_limit: int = 20_000,
        watch_buffer: int = 50_000,
        event_ttl_s: float = 3600.0,
        event_limit: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {r: {} for r in KINDS}
        self._history: deque[Change] = deque()
        self._history_limit = history_limit
        self._compacted_rv = 0
        self._watch_buffer = watch_buffer
        self._watchers: dict[str, set[Watcher]] = {r: set() for r in KINDS}
        self._by_node: dict[str, set[Watcher]] = {}
        self._unindexed_pods: set[Watcher] = set()
        self._event_ttl_s, self._event_limit, self._clock = event_ttl_s, event_limit, clock
        self._event_expiry: OrderedDict[Key, float] = OrderedDict()
        """Live events, least recently written first, with the clock time each expires."""

    # reads -----------------------------------------------------------------

    def _live(self, resource: str) -> dict[Key, Obj]:
        """The objects of ``resource`` as a read sees them: for events, the expired ones gone first."""
        if resource == "events":
            self.expire_events()
        return self._objects[resource]

    def get(self, resource: str, namespace: str, name: str) -> Obj:
        obj = self._live(resource).get((namespace, name))
        if obj is None:
            raise ApiError.not_found(resource, name)
        return obj

    def find(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self._live(resource).get((namespace, name))

    def items(self, resource: str, namespace: str | None = None) -> Iterable[Obj]:
        objects = self._live(resource).values()
        if namespace is None:
            return objects
        return (o for o in objects if o["metadata"].get("namespace") == namespace)

    def list(
        self, resource: str, namespace: str | None, field_selector: str | None, label_selector: str | None
    ) -> tuple[list[Obj], str]:
        fields, _ = parse_field_selector(resource, field_selector)
        labels = parse_label_selector(label_selector)
        items = [o for o in self.items(resource, namespace) if fields(o) and labels(o)]
        return items, str(self.rv)

    # writes ----------------------------------------------------------------

    def _commit(self, resource: str, kind: str, obj: Obj, old: Obj | None) -> Obj:
        """Store one write and tell the watchers. The event is serialised before anything changes,
        so a write that cannot be sent is not stored; a watcher that cannot take it is closed (its
        client re-watches) rather than left open without it."""
        rv = self.rv + 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}
        change = Change(rv, resource, kind, obj, old)
        change.line()
        self.rv = rv
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        if kind == "DELETED":
            del self._objects[resource][key]
        else:
            self._objects[resource][key] = obj
        self._remember(change)
        for watcher in self._watchers_for(change):
            try:
                watcher.offer(change)
            except Exception:
                log.exception("closing a %s watch that could not take change %d", resource, rv)
                watcher.close()
        if resource == "events":
            self._track_event(kind, key)
        return obj

    def create(self, resource: str, obj: Obj, *, dry_run: bool = False) -> Obj:
        meta = obj["metadata"]
        if (meta.get("namespace", ""), meta["name"]) in self._objects[resource]:
            raise ApiError.already_exists(resource, meta["name"])
        if dry_run:
            return dryrun.created(obj)
        return self._commit(resource, "ADDED", obj, None)

    def update(self, resource: str, obj: Obj, *, expect_rv: str | None = None, dry_run: bool = False) -> Obj:
        """Store a new version; ``expect_rv`` (from the request) must match or it is a 409."""
        meta = obj["metadata"]
        old = self.get(resource, meta.get("namespace", ""), meta["name"])
        if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
            raise ApiError.conflict(resource, meta["name"], "the object has been modified; please apply "
                                    "your changes to the latest version and try again")
        if dry_run:
            return dryrun.updated(obj, old)
        return self._commit(resource, "MODIFIED", obj, old)

    def delete(self, resource: str, namespace: str, name: str, *, dry_run: bool = False) -> Obj:
        old = self.get(resource, namespace, name)
        return old if dry_run else self._commit(resource, "DELETED", old, old)

    # event expiry ------------------------------------------------------------

    def _track_event(self, kind: str, key: Key) -> None:
        if kind == "DELETED":
            self._event_expiry.pop(key, None)
            return
        self._event_expiry[key] = self._clock() + self._event_ttl_s
        self._event_expiry.move_to_end(key)
        self.expire_events()

    def expire_events(self) -> None:
        """Delete the events past their TTL, then the least recently written beyond the limit."""
        expiry, now = self._event_expiry, self._clock()
        while expiry:
            key, expires = next(iter(expiry.items()))
            if expires > now and len(expiry) <= self._event_limit:
                return
            old = self._objects["events"][key]
            self._commit("events", "DELETED", old, old)  # pops ``key``: not ``delete``, which reads back here

    # history and watch -------------------------------------------------------

    def _remember(self, change: Change) -> None:
        self._history.append(change)
        if len(self._history) > self._history_limit:
            self._compacted_rv = self._history.popleft().rv

    def _watchers_for(self, change: Change) -> Iterable[Watcher]:
        if change.resource != "pods" or not self._by_node:
            return list(self._watchers[change.resource])
        selected = list(self._unindexed_pods)
        node = field_value(change.obj, _NODE_PATH)
        selected.extend(self._by_node.get(node, ()))
        if change.old is not None:
            old_node = field_value(change.old, _NODE_PATH)
            if old_node != node:
                selected.extend(self._by_node.get(old_node, ()))
        return selected

    def watch(
        self,
        resource: str,
        namespace: str | None,
        field_selector: str | None,
        label_selector: str | None,
        resource_version: str | None,
    ) -> Watcher:
        """Open a watch: synthetic ADDED (rv unset or "0") or history replay after ``resource_version``."""
        fields, equals = parse_field_selector(resource, field_selector)
        node = equals.get("spec.nodeName") if resource == "pods" else None
        watcher = Watcher(resource, namespace, fields, parse_label_selector(label_selector), node,
                          self._watch_buffer)
        if resource_version in (None, "", "0"):
            for obj in self.items(resource, namespace):
                if watcher.matches(obj):
                    watcher.push(event_line("ADDED", obj), self.rv)
        else:
            self._replay(watcher, resource_version)
        watcher.sent_rv = self.rv
        self._watchers[resource].add(watcher)
        if node is not None:
            self._by_node.setdefault(node, set()).add(watcher)
        elif resource == "pods":
            self._unindexed_pods.add(watcher)
        return watcher

    def _replay(self, watcher: Watcher, resource_version: str) -> None:
        try:
            since = int(resource_version)
        except ValueError as e:
            raise ApiError.bad_request(f"invalid resourceVersion {resource_version!r}") from e
        if since < self._compacted_rv:
            raise ApiError.gone(f"too old resource version: {since} ({self._compacted_rv + 1})")
        pending: list[Change] = []
        for change in reversed(self._history):
            if change.rv <= since:
                break
            pending.append(change)
        for change in reversed(pending):
            if change.resource == watcher.resource:
                watcher.offer(change)

    def unwatch(self, watcher: Watcher) -> None:
        watcher.close()
        self._watchers[watcher.resource].discard(watcher)
        self._unindexed_pods.discard(watcher)
        if watcher.node is not None:
            group = self._by_node.get(watcher.node)
            if group is not None:
                group.discard(watcher)
                if not group:
                    del self._by_node[watcher.node]

    def close_all_watches(self) -> None:
        for group in self._watchers.values():
            for watcher in list(group):
                self.unwatch(watcher)

    def compact(self) -> None:
        """Drop all history (tests use it to make every older resourceVersion 410)."""
        if self._history:
            self._compacted_rv = self._history[-1].rv
        self._history.clear()
