"""Leases in the ``locks`` bucket: node locks and leader election (protocols.md §5 recipe).

The bucket TTL (or a shorter per-key TTL) is the lease: ``create`` acquires, ``update(last=rev)``
renews, ``delete(last=rev)`` releases, and a lost compare-and-set means the lease is gone.
A holder reported dead by the caller's ``is_owner_alive`` is taken over at once instead of
waiting for its TTL. The value is the owner's id as UTF-8. Knows nothing of pods or nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType

from shared.bus.kv import KV
from shared.errors import BusUnavailable, CasConflict, LeaseHeld, LeaseLost
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: ``is_owner_alive(owner) -> bool``: False lets a new owner take the lease over immediately.
OwnerCheck = Callable[[str], Awaitable[bool]]

_ATTEMPTS = 3


class Lease:
    """One key in ``locks`` that ``owner`` may hold. Not acquired until :meth:`acquire` says so."""

    def __init__(self, kv: KV, key: str, owner: str, *, ttl: float, per_key_ttl: bool,
                 auto_renew: bool) -> None:
        self._kv = kv
        self.key = key
        self.owner = owner
        self.ttl = ttl
        self._msg_ttl = ttl if per_key_ttl else None
        self.auto_renew = auto_renew
        self.revision: int | None = None
        self.lost = asyncio.Event()
        """Set when a held lease was taken over or expired; the holder must stop acting on it."""
        self._renewer: asyncio.Task[None] | None = None
        self._renewed_at = 0.0

    @property
    def held(self) -> bool:
        return self.revision is not None and not self.lost.is_set()

    async def holder(self) -> str | None:
        """Who holds the key now (None if nobody)."""
        entry = await self._kv.get(self.key)
        return None if entry is None else entry.value.decode("utf-8", "replace")

    async def acquire(self, is_owner_alive: OwnerCheck | None = None, *, over: int | None = None) -> bool:
        """Take the lease if free, ours already (re-entrant), or held by an owner reported dead.

        ``over``: the delete marker a watch last showed for the key (see ``KV.create``).
        """
        if self.held:
            return True
        for _ in range(_ATTEMPTS):
            try:
                self._took(await self._kv.create(self.key, self.owner.encode(), ttl=self._msg_ttl, over=over))
                return True
            except CasConflict:
                over = None
            entry = await self._kv.get(self.key)
            if entry is None:
                continue  # released or expired in between
            holder = entry.value.decode("utf-8", "replace")
            if holder == self.owner:
                if await self._adopt(entry.revision):
                    return True
                continue
            if is_owner_alive is None or await is_owner_alive(holder):
                return False
            log.info("lease %s: holder %s is gone; %s takes over", self.key, holder, self.owner)
            with contextlib.suppress(CasConflict):
                await self._kv.delete(self.key, last=entry.revision)
        return False

    async def acquire_or_raise(self, is_owner_alive: OwnerCheck | None = None) -> None:
        if not await self.acquire(is_owner_alive):
            raise LeaseHeld(f"lease {self.key} is held by {await self.holder()!r}")

    async def renew(self) -> None:
        """Extend the lease by one TTL; raises ``LeaseLost`` if someone else has it now."""
        if self.revision is None or self.lost.is_set():
            raise LeaseLost(f"lease {self.key} is not held by {self.owner}")
        try:
            self.revision = await self._kv.update(self.key, self.owner.encode(), self.revision,
                                                  ttl=self._msg_ttl)
        except CasConflict as e:
            self._mark_lost("taken over or expired")
            raise LeaseLost(f"lease {self.key} lost by {self.owner}") from e
        self._renewed_at = time.monotonic()

    async def release(self, revision: int | None = None) -> bool:
        """Give the lease back if ``owner`` holds it (also from another process); True if released.

        ``revision``: the one the owner took the key at, as its taker reported it (positive; others
        are ignored). The release is then one compare-and-delete, and losing the compare means the
        owner's hold is gone already. Without it, a lease this object holds deletes at its own
        revision first; otherwise (or if a renewal raced that) the owner is read, then deleted.
        """
        await self._stop_renewer()
        told = revision is not None and revision > 0
        known, self.revision = (revision if told else self.revision), None
        if known:
            try:
                await self._kv.delete(self.key, last=known)
            except CasConflict:
                if told:
                    return False
            else:
                return True
        entry = await self._kv.get(self.key)
        if entry is None or entry.value.decode("utf-8", "replace") != self.owner:
            return False
        try:
            await self._kv.delete(self.key, last=entry.revision)
        except CasConflict:
            return False
        return True

    async def close(self) -> None:
        """Stop renewing without releasing (the TTL will end the lease)."""
        await self._stop_renewer()

    async def __aenter__(self) -> Lease:
        await self.acquire_or_raise()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        with contextlib.suppress(BusUnavailable):
            await self.release()

    async def _adopt(self, revision: int) -> bool:
        """Re-entrant acquire: refresh our own existing lease so its TTL restarts now."""
        self.revision = revision
        self.lost.clear()
        try:
            await self.renew()
        except LeaseLost:
            self.revision = None
            self.lost.clear()
            return False
        self._start_renewer()
        return True

    def _took(self, revision: int) -> None:
        self.revision = revision
        self.lost.clear()
        self._renewed_at = time.monotonic()
        self._start_renewer()

    def _start_renewer(self) -> None:
        if self.auto_renew and (self._renewer is None or self._renewer.done()):
            self._renewer = asyncio.create_task(self._renew_loop(), name=f"lease-renew-{self.key}")

    async def _stop_renewer(self) -> None:
        task, self._renewer = self._renewer, None
        await cancel_and_wait(task)  # skips the renewer itself, which cannot wait for its own end

    def give_up(self, why: str) -> None:
        """Count the lease as lost now (the holder learnt elsewhere that it no longer holds it): its
        renewals stop and ``lost`` is set; the key itself is left to its new holder or its TTL."""
        self._mark_lost(why)

    def _mark_lost(self, why: str) -> None:
        if not self.lost.is_set():
            log.warning("lease %s held by %s lost: %s", self.key, self.owner, why)
        self.lost.set()

    async def _renew_loop(self) -> None:
        interval = self.ttl / 3
        while self.held:
            await asyncio.sleep(interval)
            try:
                await self.renew()
            except LeaseLost:
                return
            except BusUnavailable as e:
                if time.monotonic() - self._renewed_at > self.ttl:
                    self._mark_lost(f"not renewed for a whole TTL ({e})")
                    return
                log.warning("lease %s: renew failed, will retry: %s", self.key, e)
