"""Kubernetes Events from the stand-ins: what kube-scheduler and the kubelet tell a user about a pod.

Both write core/v1 Events the way client-go's ``tools/record`` recorder does. The kubelet always
does; kube-scheduler writes events.k8s.io/v1 where the API server serves it and falls back to
this one where it does not (``NewEventBroadcasterAdapter``), which is the stand-in's case. So:

- :func:`build_event` is ``makeEvent``: named ``<object>.<unix nanoseconds in hex>`` in the
  object's namespace, ``count`` 1, ``firstTimestamp`` = ``lastTimestamp``, ``source`` and
  ``reportingComponent``/``reportingInstance`` from the recorder's source. kube-scheduler's
  source is the profile's scheduler name (``default-scheduler``, ``hami-scheduler`` for HAMi's
  second kube-scheduler, here ``gpubus-scheduler``) without a host; the kubelet's is ``kubelet``
  on its node.
- :class:`Correlator` is ``EventCorrelator``: a repeat of an event (same source, object, type,
  reason and message) is a patch of the first one's ``count``, ``lastTimestamp`` and ``message``;
  the 10th distinct message for one object and reason within 10 minutes becomes one event
  "(combined from similar events): ..." that later ones patch; each source may write 25 events
  about an object, then one per 5 minutes. Its caches are LRUs of 4096 keys.
- :class:`EventRecorder` is the broadcaster: ``record`` builds and correlates the event and
  queues it, never waiting and never raising; one task writes the queue in order (create, or
  patch and create if the event is gone), retrying only when the API server is unreachable.
  Past 1000 queued events new ones are dropped, as client-go drops them. Every outcome is counted.

It knows the API server only through :class:`EventSink`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from gpubus_local.sim import rfc3339
from shared.kube_errors import KubeError, KubeUnavailable, NotFound
from shared.kube_types import Event, EventSource, EventType, ObjectReference

log = logging.getLogger(__name__)

NOTE_LENGTH_LIMIT = 1024
"""kube-scheduler cuts a FailedScheduling message longer than this (``validation.NoteLengthLimit``)."""
_COMBINED = "(combined from similar events): "


class EventSink(Protocol):
    """Where events are written: the API server."""

    async def create_event(self, namespace: str, event: Event) -> Event: ...

    async def patch_event(self, namespace: str, name: str, merge_patch: dict[str, Any]) -> Event: ...


# --------------------------------------------------------------------------- the Event object


def pod_reference(pod: Mapping[str, Any], field_path: str = "") -> ObjectReference:
    """The ``involvedObject`` of an event about ``pod`` (or one of its containers, by ``field_path``
    such as ``spec.containers{main}``)."""
    meta = pod.get("metadata") or {}
    ref: ObjectReference = {"kind": "Pod", "namespace": meta.get("namespace", ""),
                            "name": meta.get("name", ""), "uid": meta.get("uid", ""), "apiVersion": "v1"}
    if meta.get("resourceVersion"):
        ref["resourceVersion"] = meta["resourceVersion"]
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def build_event(
    source: EventSource, involved: ObjectReference, type_: EventType, reason: str, message: str, *,
    now_ns: int,
) -> Event:
    """One new event, as client-go's recorder makes it before correlation."""
    at = rfc3339.format_time(now_ns)
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{involved.get('name', '')}.{now_ns:x}",
                         "namespace": involved.get("namespace") or "default"},
            "involvedObject": involved, "reason": reason, "message": message, "source": source,
            "firstTimestamp": at, "lastTimestamp": at, "count": 1, "type": type_,
            "reportingComponent": source.get("component", ""), "reportingInstance": source.get("host", "")}


def truncate_note(message: str, limit: int = NOTE_LENGTH_LIMIT) -> str:
    return message if len(message) <= limit else message[:limit - 4] + " ..."


# --------------------------------------------------------------------------- correlation


@dataclass(frozen=True, slots=True, kw_only=True)
class Correlated:
    """What to write for one recorded event: create ``event``, or apply ``patch`` to it if set."""

    event: Event
    patch: dict[str, Any] | None = None


@dataclass(slots=True)
class _Seen:
    count: int
    first: str
    name: str


@dataclass(slots=True)
class _Similar:
    messages: set[str]
    last_s: float


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A dict that forgets its least recently used keys past ``size`` (groupcache's ``lru.Cache``)."""

    def __init__(self, size: int) -> None:
        self._size, self._items = size, OrderedDict[K, V]()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._size:
            self._items.popitem(last=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CorrelatorSettings:
    cache_size: int = 4096
    aggregate_after: int = 10
    """Distinct messages for one object and reason before they are combined into one event."""
    aggregate_window_s: float = 600.0
    spam_burst: int = 25
    """Events one source may write about one object at once..."""
    spam_refill_s: float = 300.0
    """... and then one per this many seconds."""


def _object_key(event: Event) -> tuple[str, ...]:
    source, ref = event.get("source") or {}, event.get("involvedObject") or {}
    return (source.get("component", ""), source.get("host", ""), ref.get("kind", ""),
            ref.get("namespace", ""), ref.get("name", ""), ref.get("uid", ""), ref.get("apiVersion", ""))


class Correlator:
    """client-go's ``EventCorrelator`` (aggregate, then count repeats, then the spam filter). Pure."""

    def __init__(self, settings: CorrelatorSettings | None = None) -> None:
        self.settings = settings or CorrelatorSettings()
        size = self.settings.cache_size
        self._seen = _Lru[tuple[str, ...], _Seen](size)
        self._similar = _Lru[tuple[str, ...], _Similar](size)
        self._buckets = _Lru[tuple[str, ...], _Bucket](size)

    def correlate(self, event: Event, now_s: float) -> Correlated | None:
        """What to write for ``event`` recorded at ``now_s`` (seconds); None: the spam filter drops it."""
        event, key = self._aggregate(event, now_s)
        result = self._observe(event, key)
        return result if self._allow(_object_key(event), now_s) else None

    def _aggregate(self, event: Event, now_s: float) -> tuple[Event, tuple[str, ...]]:
        """``EventAggregate``: the event and its repeat key, or past the limit of distinct messages the
        combined event and the key all its later siblings share."""
        message = event.get("message", "")
        field_path = (event.get("involvedObject") or {}).get("fieldPath", "")
        about, what = _object_key(event), (event.get("type", ""), event.get("reason", ""))
        similar_key = (*about, *what, event.get("reportingComponent", ""), event.get("reportingInstance", ""))
        similar = self._similar.get(similar_key)
        if similar is None or now_s - similar.last_s > self.settings.aggregate_window_s:
            similar = _Similar(messages=set(), last_s=now_s)
        similar.messages.add(message)
        similar.last_s = now_s
        self._similar.put(similar_key, similar)
        if len(similar.messages) < self.settings.aggregate_after:
            return event, (*about, field_path, *what, message)  # client-go's getEventKey
        similar.messages.pop()
        # client-go builds the combined event afresh, without the reporting fields
        combined: Event = {**event, "message": _COMBINED + message, "reportingComponent": "",
                           "reportingInstance": ""}
        return combined, similar_key

    def _observe(self, event: Event, key: tuple[str, ...]) -> Correlated:
        """``eventObserve``: the first of its key is created; a repeat patches the first one's name."""
        seen = self._seen.get(key)
        if seen is None:
            self._seen.put(key, _Seen(count=1, first=event["firstTimestamp"], name=event["metadata"]["name"]))
            return Correlated(event=event)
        seen.count += 1
        self._seen.put(key, seen)
        repeat: Event = {**event, "metadata": {**event["metadata"], "name": seen.name}, "count": seen.count,
                         "firstTimestamp": seen.first}
        patch = {"count": seen.count, "lastTimestamp": event["lastTimestamp"], "message": event["message"]}
        return Correlated(event=repeat, patch=patch)

    def _allow(self, key: tuple[str, ...], now_s: float) -> bool:
        """The token bucket of ``EventSourceObjectSpamFilter``: starts full, refills one per interval."""
        burst, refill = self.settings.spam_burst, self.settings.spam_refill_s
        bucket = self._buckets.get(key) or _Bucket(tokens=float(burst), at_s=now_s)
        bucket.tokens = min(float(burst), bucket.tokens + (now_s - bucket.at_s) / refill)
        bucket.at_s = now_s
        self._buckets.put(key, bucket)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True


# --------------------------------------------------------------------------- the recorder


@dataclass(frozen=True, slots=True, kw_only=True)
class RecorderSettings:
    normal: bool = True
    """Record Normal events (Scheduled, Started); False keeps only Warnings. Benchmarks turn them off:
    they are the stand-ins' cost (two API writes a pod), not gpubus's."""
    queue_limit: int = 1000
    """Events waiting to be written (the one being written is not counted); more are dropped
    (client-go's ``maxQueuedEvents``). 0 drops every event."""
    max_tries: int = 12
    """Writes of one event while the API server is unreachable (client-go's ``maxTriesPerEvent``)."""
    retry_delay_s: float = 10.0
    """Between those tries; the first wait is a random part of it, so recorders do not retry in step."""
    correlator: CorrelatorSettings = field(default_factory=CorrelatorSettings)


@dataclass(slots=True)
class RecorderStats:
    created: int = 0
    patched: int = 0
    """Repeats written as a patch of the event they repeat."""
    spam: int = 0
    """Dropped by the spam filter."""
    dropped: int = 0
    """Dropped because the queue was full."""
    failed: int = 0
    """Given up: refused by the API server, or unreachable ``max_tries`` times."""
    retries: int = 0


class EventRecorder:
    """Record events about objects for one source; :meth:`run` writes them (cancel it to stop)."""

    def __init__(self, sink: EventSink, source: EventSource, settings: RecorderSettings | None = None, *,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.sink, self.source = sink, source
        self.settings = settings or RecorderSettings()
        self.stats = RecorderStats()
        self._clock = clock
        self._correlator = Correlator(self.settings.correlator)
        self._queue: asyncio.Queue[Correlated] = asyncio.Queue(maxsize=max(self.settings.queue_limit, 0))

    def wants(self, type_: EventType) -> bool:
        """Whether events of this type are recorded: callers skip building the ones that are not."""
        return type_ != "Normal" or self.settings.normal

    def record(self, involved: ObjectReference, type_: EventType, reason: str, message: str) -> None:
        """Queue an event about ``involved``; returns at once and never raises."""
        if not self.wants(type_):
            return
        try:
            now_ns = self._clock()
            event = build_event(self.source, involved, type_, reason, message, now_ns=now_ns)
            result = self._correlator.correlate(event, now_ns / 1e9)
        except Exception:
            log.exception("event %s %s about %s not recorded", type_, reason, involved.get("name"))
            self.stats.failed += 1
            return
        if result is None:
            self.stats.spam += 1
            return
        try:
            if self.settings.queue_limit <= 0:  # no room; asyncio's maxsize 0 would mean no bound
                raise asyncio.QueueFull
            self._queue.put_nowait(result)
        except asyncio.QueueFull:
            self.stats.dropped += 1
            log.debug("event queue full: %s %s about %s dropped", type_, reason, involved.get("name"))

    async def drained(self) -> None:
        """Wait until every queued event has been written or given up."""
        await self._queue.join()

    async def run(self) -> None:
        """Write queued events in order, forever. One event's failure never ends it."""
        while True:
            item = await self._queue.get()
            try:
                await self._write(item)
            except Exception:
                log.exception("event %s not written", item.event["metadata"]["name"])
                self.stats.failed += 1
            finally:
                self._queue.task_done()

    async def _write(self, item: Correlated) -> None:
        for attempt in range(1, self.settings.max_tries + 1):
            try:
                await self._write_once(item)
                return
            except KubeUnavailable as e:
                if attempt == self.settings.max_tries:
                    log.warning("event %s not written after %d tries: %s", item.event["metadata"]["name"],
                                attempt, e)
                    break
                self.stats.retries += 1
                delay = self.settings.retry_delay_s
                await asyncio.sleep(delay * random.random() if attempt == 1 else delay)
            except KubeError as e:
                log.info("event %s refused: %s", item.event["metadata"]["name"], e)
                break
        self.stats.failed += 1

    async def _write_once(self, item: Correlated) -> None:
        event = item.event
        namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]
        if item.patch is not None:
            with contextlib.suppress(NotFound):  # expired or deleted: written again in full
                await self.sink.patch_event(namespace, name, item.patch)
                self.stats.patched += 1
                return
        await self.sink.create_event(namespace, event)
        self.stats.created += 1
