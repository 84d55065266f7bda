"""Level-triggered list + watch over the ``KubeApi`` port: one stream of ADDED/MODIFIED/DELETED.

List, then watch from the list's resourceVersion; re-watch from the last rv seen when a watch ends;
on 410 ``Gone`` re-list and diff the fresh list against what the consumer has already seen, so a
deletion that happened while disconnected is still reported. Bookmarks only advance the rv.
Nothing polls; the only sleeps are the reconnect backoff after the API server failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from shared.kube_errors import Gone, KubeUnavailable
from shared.kube_types import NodeWatchEvent, PodWatchEvent, WatchEvent

if TYPE_CHECKING:
    from shared.kube import KubeApi

log = logging.getLogger(__name__)

#: Maps a listed/watched object to the slim record to keep, or None to ignore it.
Transform = Callable[[dict[str, Any]], dict[str, Any] | None]

#: Server-side watch timeout; the client re-watches from the last resourceVersion when it ends.
WATCH_TIMEOUT_S = 300



class Backoff:
    """Exponential delay for re-connecting after the API server failed (not for waiting on state)."""

    def __init__(self, *, initial_s: float = 0.2, max_s: float = 10.0) -> None:
        self._initial, self._max, self._next = initial_s, max_s, initial_s

    def reset(self) -> None:
        self._next = self._initial

    async def wait(self) -> None:
        delay, self._next = self._next, min(self._next * 2, self._max)
        await asyncio.sleep(delay)


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _resync(
    known: dict[str, dict[str, Any]], items: list[dict[str, Any]], transform: Transform | None = None
) -> Iterator[WatchEvent]:
    """Diff a fresh list against what the consumer has seen: ADDED/MODIFIED/DELETED to converge."""
    fresh = {_key(item): item if transform is None else transform(item) for item in items}
    for key in [k for k in known if k not in fresh]:
        yield {"type": "DELETED", "object": known.pop(key)}
    for key, item in fresh.items():
        if item is None:
            known.pop(key, None)  # still exists but no longer of interest: forgotten, not deleted
            continue
        old = known.get(key)
        known[key] = item
        if old is None:
            yield {"type": "ADDED", "object": item}
        elif old.get("metadata", {}).get("resourceVersion") != item["metadata"].get("resourceVersion"):
            yield {"type": "MODIFIED", "object": item}


def _transformed(
    known: dict[str, dict[str, Any]], event: WatchEvent, transform: Transform | None
) -> WatchEvent | None:
    """The event as the consumer sees it (slimmed), with ``known`` updated; None to skip it."""
    obj: dict[str, Any] = event["object"]
    key = _key(obj)
    slim = obj if transform is None else transform(obj)
    if event["type"] == "DELETED":
        held = known.pop(key, None)
        if slim is None:
            slim = held  # a kept object is always reported gone, even if it stopped mattering
        return None if slim is None else {"type": "DELETED", "object": slim}
    if slim is None:
        known.pop(key, None)
        return None
    known[key] = slim
    return event if slim is obj else {"type": event["type"], "object": slim}


async def list_and_watch(
    lister: Callable[[], Awaitable[tuple[list[Any], str]]],
    watcher: Callable[[str], AsyncIterator[WatchEvent]],
    *,
    synced: asyncio.Event | None = None,
    what: str = "objects",
    transform: Transform | None = None,
) -> AsyncIterator[WatchEvent]:
    """List, then watch from the list's rv forever; re-list on 410 and diff so nothing is missed.

    Yields only ADDED/MODIFIED/DELETED (bookmarks just advance the rv). ``synced`` is set once the
    first list has been consumed, i.e. the consumer's state reflects the whole cluster.
    ``transform`` (optional) maps each object to the slim record kept and yielded instead (it must
    keep ``metadata.namespace``/``name``/``resourceVersion``), or to None for objects of no
    interest: those are neither held nor yielded, so memory stays bounded by what matters. A kept
    object that stops mattering is forgotten without an event; its deletion is still reported.
    """
    known: dict[str, dict[str, Any]] = {}
    backoff = Backoff()
    while True:
        try:
            items, rv = await lister()
        except KubeUnavailable as e:
            log.warning("list %s failed, retrying: %s", what, e)
            await backoff.wait()
            continue
        for event in _resync(known, items, transform):
            yield event
        if synced is not None:
            synced.set()
        while True:
            try:
                events = watcher(rv)
                try:
                    async for event in events:
                        rv = event["object"].get("metadata", {}).get("resourceVersion") or rv
                        backoff.reset()
                        if event["type"] == "BOOKMARK":
                            continue
                        seen = _transformed(known, event, transform)
                        if seen is not None:
                            yield seen
                finally:
                    aclose = getattr(events, "aclose", None)
                    if aclose is not None:
                        await aclose()
            except Gone:
                log.info("watch %s: resourceVersion %s expired, re-listing", what, rv)
                break
            except KubeUnavailable as e:
                log.warning("watch %s failed, re-watching from %s: %s", what, rv, e)
                await backoff.wait()


async def list_and_watch_pods(
    api: KubeApi,
    *,
    field_selector: str | None = None,
    label_selector: str | None = None,
    synced: asyncio.Event | None = None,
    timeout_seconds: int = WATCH_TIMEOUT_S,
    transform: Transform | None = None,
) -> AsyncIterator[PodWatchEvent]:
    """Level-triggered pod stream (see :func:`list_and_watch`, also for ``transform``)."""

    async def lister() -> tuple[list[Any], str]:
        return await api.list_pods(field_selector=field_selector, label_selector=label_selector)

    def watcher(rv: str) -> AsyncIterator[WatchEvent]:
        return api.watch_pods(rv, field_selector=field_selector, label_selector=label_selector,
                              timeout_seconds=timeout_seconds)

    async for event in list_and_watch(lister, watcher, synced=synced, what="pods", transform=transform):
        yield cast(PodWatchEvent, event)


async def list_and_watch_nodes(
    api: KubeApi, *, synced: asyncio.Event | None = None, timeout_seconds: int = WATCH_TIMEOUT_S
) -> AsyncIterator[NodeWatchEvent]:
    """Level-triggered node stream (see :func:`list_and_watch`)."""

    async def lister() -> tuple[list[Any], str]:
        return await api.list_nodes()

    def watcher(rv: str) -> AsyncIterator[WatchEvent]:
        return api.watch_nodes(rv, timeout_seconds=timeout_seconds)

    async for event in list_and_watch(lister, watcher, synced=synced, what="nodes"):
        yield cast(NodeWatchEvent, event)
