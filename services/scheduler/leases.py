"""The Allocate ambiguity leases ``alloc.<node>.<n>`` (the handoff of ``shared/handoff.py``).

Before a pod is bound, it takes one lease per distinct per-container device count ``n`` of its GPU
containers, in ascending order (no deadlock between two pods that need several). The node-agent
releases them once Allocate has run. A held key is waited for without polling: a KV watch on
``alloc.>`` wakes the waiter when the key changes, a timer fires when the holder's TTL must have
run out (expiry writes no marker), and :meth:`AllocLeases.wake` re-checks when a holder's ledger
entry changed (an owner that is gone is taken over at once).

Knows the key scheme and the bus lease; must not know HTTP, Kubernetes or Fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from shared.bus import KV, LOCKS, Bus, Entry, Lease, Watch
from shared.bus.kv import ttl_header_seconds
from shared.component import Component
from shared.errors import BusUnavailable, CasConflict
from shared.handoff import device_counts, lease_key
from shared.model import NodeName, PodDevices

log = logging.getLogger(__name__)

#: ``owner_alive(pod_uid) -> bool``: False lets a waiter take the lease over at once.
OwnerAlive = Callable[[str], bool]
#: KV keeps a key a little past its TTL before expiring it.
_EXPIRY_SLACK_S = 0.2
#: How long past its TTL a lease must be before the sweep deletes it (the server's expiry goes first).
_SWEEP_GRACE_S = 5.0
#: Least wait after a lost attempt whose holder's TTL should be over (expiry writes no marker).
_RETRY_S = 0.05


class LeaseTimeout(Exception):
    """The leases could not be taken within the bind budget."""

    def __init__(self, key: str, holder: str | None) -> None:
        super().__init__(f"Allocate lease {key} is still held by pod {holder or '?'}")
        self.key = key
        self.holder = holder


class _Holder:
    """A key's holder as the watch last showed it, and when that revision was first seen."""

    __slots__ = ("owner", "revision", "seen_at")

    def __init__(self, owner: str, revision: int, seen_at: float) -> None:
        self.owner = owner
        self.revision = revision
        self.seen_at = seen_at


class AllocLeases(Component):
    """Acquire, wait for and release the ambiguity leases of pods.

    The watch on ``alloc.>`` also keeps who holds each key (a hint, never the decision: only a KV
    create takes a lease). A waiter woken while the hint shows a live holder whose TTL has not run
    out waits on without touching KV, so the wakes from every ledger change on a hot node cost a
    dict lookup instead of three KV round trips; and a pod's leases are released only where the
    hint shows it still holding them (the node-agent normally released them at Allocate). A lease
    missed by a lagging hint is harmless: its owner is gone, so the next waiter takes it over.
    """

    def __init__(self, bus: Bus, *, ttl: float, owner_alive: OwnerAlive) -> None:
        super().__init__()
        self._bus = bus
        self._ttl = ttl
        self._owner_alive = owner_alive
        self._kv: KV | None = None
        self._watch: Watch | None = None
        self._waiters: dict[str, dict[str, asyncio.Event]] = {}
        """node -> key -> the one local waiter contending for it (see ``_acquire_one``)."""
        self._queues: dict[str, asyncio.Lock] = {}
        self._holders: dict[str, _Holder] = {}
        self._deleted: dict[str, int] = {}
        """key -> revision of its delete marker, while the watch shows it free."""
        self.takeovers = 0
        self.swept = 0
        """Leases deleted by :meth:`sweep` (their TTL long over, their owner gone)."""

    async def _open(self, exits: contextlib.AsyncExitStack) -> None:
        """Open the ``locks`` bucket and watch ``alloc.>``; the end stops the watch, then wakes every
        waiter to look again, so none sleeps on past it."""
        exits.callback(self.wake)
        self._kv = await self._bus.kv(LOCKS)
        self._watch = await self._kv.watch(self._on_key, keys="alloc.>", tombstones=self._on_tombstone)
        exits.push_async_callback(self._watch.stop)
        # and what was held before the watch began (a restarted leader's, or a dead one's): one
        # bulk read, so the sweep and the waiters know those holders too
        for key, entry in (await self._kv.items()).items():
            if key.startswith("alloc."):
                self._note_held(key, entry.value.decode("utf-8", "replace"), entry.revision)

    @property
    def effective_ttl(self) -> float:
        return float(ttl_header_seconds(min(self._ttl, self._bus.settings.lock_ttl_s)))

    def wake(self, node: NodeName | None = None) -> None:
        """Re-check waiters (for one node, or all): a holder's ledger entry changed."""
        if node is None:
            groups = list(self._waiters.values())
        else:
            group = self._waiters.get(node)
            groups = [] if group is None else [group]
        for group in groups:
            for event in group.values():
                event.set()

    def holder_hint(self, key: str) -> str | None:
        """Who holds ``key`` as the watch (or this process's own acquire) last showed it."""
        held = self._holders.get(key)
        return None if held is None else held.owner

    def freed_at(self, key: str) -> int | None:
        """The delete marker the watch last showed for ``key`` while it is free (None: held or unseen)."""
        return self._deleted.get(key)

    def _newest(self, key: str) -> int:
        held = self._holders.get(key)
        return held.revision if held is not None else self._deleted.get(key, 0)

    def _note_held(self, key: str, owner: str, revision: int) -> None:
        """The hint's one rule: a change newer than the last one known replaces it (the same
        revision seen again keeps its first sighting, from which its TTL is counted)."""
        if revision > self._newest(key):
            self._holders[key] = _Holder(owner, revision, time.monotonic())
            self._deleted.pop(key, None)

    def _note_freed(self, key: str, marker: int) -> None:
        if marker > self._newest(key):
            self._holders.pop(key, None)
            self._deleted[key] = marker

    def _on_tombstone(self, key: str, revision: int) -> None:
        self._note_freed(key, revision)

    async def _on_key(self, key: str, entry: Entry | None) -> None:
        if entry is not None:  # deletes come through _on_tombstone, with their revision
            self._note_held(key, entry.value.decode("utf-8", "replace"), entry.revision)
        group = self._waiters.get(_node_of(key))
        event = None if group is None else group.get(key)
        if event is not None:
            event.set()

    async def acquire(self, node: str, counts: Iterable[int], owner: str, deadline: float) -> list[Lease]:
        """All leases for ``counts`` (ascending), or none: raises LeaseTimeout at ``deadline`` (monotonic)."""
        held: list[Lease] = []
        try:
            for n in sorted(set(counts)):
                held.append(await self._acquire_one(node, lease_key(node, n), owner, deadline))
        except BaseException:
            await self.release(held)
            raise
        return held

    async def _acquire_one(self, node: str, key: str, owner: str, deadline: float) -> Lease:
        # In-process FIFO: only the first local waiter contends for the key, so a release wakes
        # one KV attempt instead of a thundering herd (80 pods onto one node).
        queue = self._queues.setdefault(key, asyncio.Lock())
        try:
            # asyncio.timeout, not wait_for: no extra task per bind when the queue is free
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                await queue.acquire()
        except TimeoutError:
            raise LeaseTimeout(key, None) from None
        group = self._waiters.setdefault(node, {})
        event = group[key] = asyncio.Event()
        try:
            return await self._contend(key, owner, deadline, event)
        finally:
            del group[key]
            if not group:
                self._waiters.pop(node, None)
            queue.release()

    async def _contend(self, key: str, owner: str, deadline: float, event: asyncio.Event) -> Lease:
        lease = await self._bus.lease(key, owner, ttl=self._ttl, auto_renew=False)

        async def alive(holder: str) -> bool:
            return self._owner_alive(holder)

        while True:
            event.clear()
            now = time.monotonic()
            expires = self._expiry(key, owner, now)
            if expires is None:  # free, ours, its owner gone, or its TTL over: ask KV
                await self._clear_finished_holder(key, owner)
                if await lease.acquire(alive, over=self._deleted.get(key)):
                    # noted before the watch echoes it, so the next local waiter waits on the hint
                    # instead of a create that must fail and a read to learn who won
                    self._note_held(key, owner, lease.revision or 0)
                    return lease
                if key not in self._holders:
                    await self._learn_holder(key)  # held since before our watch started
                now = time.monotonic()
                expires = self._expiry(key, owner, now) or now + _RETRY_S
            if now >= deadline:
                raise LeaseTimeout(key, await lease.holder())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(deadline, expires) - now):
                    await event.wait()

    async def _clear_finished_holder(self, key: str, owner: str) -> None:
        """Delete a lease whose holder (by the hint) is past Allocate, at the revision the watch showed.

        The usual case on a busy node: the scheduler has the previous pod's ``allocation.applied``
        before the node-agent's delete of its lease. One compare-and-delete instead of a create that
        must fail and a read to learn the holder; a stale hint loses the compare and changes nothing.
        The marker's revision lets the create that follows be one write too.
        """
        held = self._holders.get(key)
        if held is None or held.owner == owner or self._owner_alive(held.owner):
            return
        assert self._kv is not None
        with contextlib.suppress(CasConflict):
            self._note_freed(key, await self._kv.delete(key, last=held.revision))
            self.takeovers += 1

    async def _learn_holder(self, key: str) -> None:
        assert self._kv is not None
        entry = await self._kv.get(key)
        if entry is not None:
            self._note_held(key, entry.value.decode("utf-8", "replace"), entry.revision)

    def _expiry(self, key: str, owner: str, now: float) -> float | None:
        """When the key's live holder (by the watch) must have lost it by TTL; None: try KV now."""
        held = self._holders.get(key)
        if held is None or held.owner == owner or not self._owner_alive(held.owner):
            return None
        expires = held.seen_at + self.effective_ttl + _EXPIRY_SLACK_S
        return expires if expires > now else None

    async def sweep(self) -> int:
        """Delete the leases the watch shows held longer than their TTL (and a grace) since their
        first sighting, by an owner that is gone; how many. nats-server expires by TTL on each
        replica on its own, and a key a restarted replica kept would otherwise stay until the next
        bind on its node took it over. A compare-and-delete at the revision seen: a lease taken
        again meanwhile is left alone."""
        assert self._kv is not None
        now, ttl = time.monotonic(), self.effective_ttl
        stale = [(key, held.revision) for key, held in self._holders.items()
                 if now > held.seen_at + ttl + _SWEEP_GRACE_S and not self._owner_alive(held.owner)]
        swept = 0
        for key, revision in stale:
            with contextlib.suppress(CasConflict, BusUnavailable):
                self._note_freed(key, await self._kv.delete(key, last=revision))
                swept += 1
        self.swept += swept
        return swept

    async def release(self, leases: Iterable[Lease]) -> None:
        for lease in leases:
            with contextlib.suppress(BusUnavailable):
                await lease.release()

    async def release_for(self, node: str, devices: PodDevices, owner: str) -> None:
        """Release whatever of a pod's leases it still holds (pod gone, bind failed, entry failed)."""
        for n in device_counts(devices):
            key = lease_key(node, n)
            held = self._holders.get(key)
            revision = held.revision if held is not None and held.owner == owner else None
            if held is None and self._kv is not None:
                # taken before this process watched (a dead leader's): ask the bucket
                with contextlib.suppress(BusUnavailable):
                    entry = await self._kv.get(key)
                    if entry is not None and entry.value.decode("utf-8", "replace") == owner:
                        revision = entry.revision
            if revision is None:
                continue  # released at Allocate (the usual case), or someone else's by now
            lease = await self._bus.lease(key, owner, ttl=self._ttl, auto_renew=False)
            with contextlib.suppress(BusUnavailable):
                await lease.release(revision)


def _node_of(key: str) -> str:
    """``alloc.<node>.<n>`` -> node (node names may contain dots; ``n`` never does)."""
    return key[len("alloc.") : key.rindex(".")]
