"""Leader election among scheduler replicas: one KV lease (``leader.scheduler`` in ``locks``).

Exactly one replica holds the lease and binds; the others answer filter/prioritize from the same
KV-fed ledger. The holder renews every TTL/3; a standby retries when the key changes (watch) or at
least every TTL/3 (a crashed leader's TTL expiry writes no event), so takeover comes within about
one TTL. ``on_elected``/``on_deposed`` start and stop the leader-only work.
Must not know HTTP, Kubernetes or the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from shared.bus import LOCKS, Bus, Entry, Lease
from shared.errors import BusUnavailable

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]
#: Wait before campaigning again after a set-up that NATS interrupted, seconds.
_RETAKE_S = 1.0


class LeaderElection:
    """Run with :meth:`run` as an owned task; :attr:`is_leader` is the current answer."""

    def __init__(
        self, bus: Bus, *, key: str, replica: str, ttl: float, on_elected: Hook, on_deposed: Hook
    ) -> None:
        self._bus = bus
        self._key = key
        self.replica = replica
        self._ttl = ttl
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._lease: Lease | None = None
        self._changed = asyncio.Event()
        self.is_leader = False
        self.leader: str | None = None
        """Who holds the lease as far as this replica knows (None: nobody)."""

    async def run(self) -> None:
        kv = await self._bus.kv(LOCKS)
        watch = await kv.watch(self._on_key, keys=self._key)
        self._lease = await self._bus.lease(self._key, self.replica, ttl=self._ttl, auto_renew=True)
        try:
            while True:
                await self._campaign(self._lease)
        finally:
            await watch.stop()
            await self._step_down(release=True)

    async def _on_key(self, key: str, entry: Entry | None) -> None:
        self.leader = None if entry is None else entry.value.decode("utf-8", "replace")
        self._changed.set()

    async def _campaign(self, lease: Lease) -> None:
        self._changed.clear()
        try:
            won = await lease.acquire()
        except BusUnavailable as e:
            log.warning("leader election: %s", e)
            won = False
        if won:
            self.leader = self.replica
            self.is_leader = True
            log.info("replica %s is now the scheduler leader", self.replica)
            try:
                await self._on_elected()
            except BusUnavailable as e:
                # NATS went away between the win and the leader's set-up (its subscriptions): give
                # the lease back and campaign again, rather than end the election (and the process)
                log.warning("replica %s could not take up leadership (%s); stepping down", self.replica, e)
                await self._step_down(release=True)
                await asyncio.sleep(min(_RETAKE_S, self._ttl / 3))
                return
            await lease.lost.wait()
            log.warning("replica %s lost the leader lease", self.replica)
            await self._step_down(release=False)
            return
        with contextlib.suppress(BusUnavailable):
            self.leader = await lease.holder()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout=self._ttl / 3)

    async def _step_down(self, *, release: bool) -> None:
        if self.is_leader:
            self.is_leader = False
            await self._on_deposed()
        if release and self._lease is not None:
            with contextlib.suppress(BusUnavailable, asyncio.CancelledError):
                await self._lease.release()

    def fenced(self, why: str) -> None:
        """The store refused a decision of this replica's term (a newer term began): whatever the
        lease looks like from here, step down now (:meth:`run` campaigns again, as a standby)."""
        if self.is_leader and self._lease is not None:
            log.warning("replica %s was fenced off (%s); stepping down", self.replica, why)
            self._lease.give_up("a newer scheduler term began")

    async def abdicate_without_release(self) -> None:
        """Stop renewing but leave the key to expire (what a crash looks like; for tests)."""
        if self._lease is not None:
            await self._lease.close()
