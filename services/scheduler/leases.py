"""The Allocate ambiguity leases ``alloc.<node>.<n>`` (HELPERS.md handoff, contract item 1).

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
from shared.errors import BusUnavailable
from shared.handoff import lease_key
from shared.model import NodeName, PodDevices

log = logging.getLogger(__name__)

#: ``owner_alive(pod_uid) -> bool``: False lets a waiter take the lease over at once.
OwnerAlive = Callable[[str], bool]


class LeaseTimeout(Exception):
    """The leases could not be taken within the bind budget."""

    def __init__(self, key: str, holder: str | None) -> None:
        super().__init__(f"Allocate lease {key} is still held by pod {holder or '?'}")
        self.key = key
        self.holder = holder


def device_counts(devices: PodDevices) -> list[int]:
    """Distinct per-container device counts of the GPU containers, ascending."""
    return sorted({len(slot) for slot in devices if slot})


class AllocLeases:
    """Acquire, wait for and release the ambiguity leases of pods."""

    def __init__(self, bus: Bus, *, ttl: float, owner_alive: OwnerAlive) -> None:
        self._bus = bus
        self._ttl = ttl
        self._owner_alive = owner_alive
        self._kv: KV | None = None
        self._watch: Watch | None = None
        self._waiters: dict[str, asyncio.Event] = {}
        self._queues: dict[str, asyncio.Lock] = {}
        self._first_seen: dict[str, tuple[int, float]] = {}
        self.takeovers = 0

    async def start(self) -> None:
        self._kv = await self._bus.kv(LOCKS)
        self._watch = await self._kv.watch(self._on_key, keys="alloc.>")

    async def close(self) -> None:
        if self._watch is not None:
            await self._watch.stop()
        self.wake()

    @property
    def effective_ttl(self) -> float:
        return float(ttl_header_seconds(min(self._ttl, self._bus.settings.lock_ttl_s)))

    def wake(self, node: NodeName | None = None) -> None:
        """Re-check waiters (for one node, or all): a holder's ledger entry changed."""
        prefix = None if node is None else f"alloc.{node}."
        for key, event in self._waiters.items():
            if prefix is None or key.startswith(prefix):
                event.set()

    async def _on_key(self, key: str, entry: Entry | None) -> None:
        event = self._waiters.get(key)
        if event is not None:
            event.set()

    async def acquire(self, node: str, counts: Iterable[int], owner: str, deadline: float) -> list[Lease]:
        """All leases for ``counts`` (ascending), or none: raises LeaseTimeout at ``deadline`` (monotonic)."""
        held: list[Lease] = []
        try:
            for n in sorted(set(counts)):
                held.append(await self._acquire_one(lease_key(node, n), owner, deadline))
        except BaseException:
            await self.release(held)
            raise
        return held

    async def _acquire_one(self, key: str, owner: str, deadline: float) -> Lease:
        # In-process FIFO: only the first local waiter contends for the key, so a release wakes
        # one KV attempt instead of a thundering herd (80 pods onto one node).
        queue = self._queues.setdefault(key, asyncio.Lock())
        try:
            await asyncio.wait_for(queue.acquire(), timeout=max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            raise LeaseTimeout(key, None) from None
        try:
            return await self._contend(key, owner, deadline)
        finally:
            queue.release()

    async def _contend(self, key: str, owner: str, deadline: float) -> Lease:
        lease = await self._bus.lease(key, owner, ttl=self._ttl, auto_renew=False)

        async def alive(holder: str) -> bool:
            return self._owner_alive(holder)

        while True:
            event = self._waiters.setdefault(key, asyncio.Event())
            event.clear()
            if await lease.acquire(alive):
                self._forget(key)
                return lease
            holder_expires = await self._holder_expiry(key)
            wait = min(deadline, holder_expires) - time.monotonic()
            if time.monotonic() >= deadline:
                self._forget(key)
                raise LeaseTimeout(key, await lease.holder())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=max(wait, 0.0))

    async def _holder_expiry(self, key: str) -> float:
        """When the current holder's TTL must have run out, counted from when we first saw its revision."""
        assert self._kv is not None
        entry = await self._kv.get(key)
        now = time.monotonic()
        if entry is None:
            return now
        seen = self._first_seen.get(key)
        if seen is None or seen[0] != entry.revision:
            seen = (entry.revision, now)
            self._first_seen[key] = seen
        return seen[1] + self.effective_ttl + 0.2

    def _forget(self, key: str) -> None:
        self._first_seen.pop(key, None)

    async def release(self, leases: Iterable[Lease]) -> None:
        for lease in leases:
            with contextlib.suppress(BusUnavailable):
                await lease.release()

    async def release_for(self, node: str, devices: PodDevices, owner: str) -> None:
        """Release whatever of a pod's leases it still holds (pod gone, bind failed, entry failed)."""
        for n in device_counts(devices):
            lease = await self._bus.lease(lease_key(node, n), owner, ttl=self._ttl, auto_renew=False)
            with contextlib.suppress(BusUnavailable):
                await lease.release()
