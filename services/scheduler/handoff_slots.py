"""The Allocate handoff slots: at most one pod per (node, n) decided and not yet allocated.

The kubelet's Allocate names devices, not the pod (``shared/handoff.py``), so on a node at most one
pod with an ``n``-device GPU container may be decided (DECIDED in the ledger) and not yet served by
Allocate (APPLIED) at a time. The leader keeps this over its own ledger, in memory: a bind waits
while another pod's entry holds its (node, n) slot, and is woken by the ledger's changes on that
node (:meth:`HandoffSlots.wake`), never by polling. The ledger is rebuilt from KV by a new leader
before it decides anything (``State.begin_term``), so a decision of the old term holds its slot
across a failover. The leader's decisions are fenced at the store, so a deposed leader adds none.

:func:`slot_holder` is the pure rule; :class:`HandoffSlots` the waiting, with an in-process FIFO per
slot so that a freed slot wakes one waiter instead of every bind queued on the node. A bind holds
its slots from the moment they are free until its DECIDED entry is in the ledger (or it gave up).

Must not know NATS, HTTP, Kubernetes or Fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Container, Iterable, Iterator

from shared.handoff import device_counts
from shared.model import Allocation, AllocationState, NodeName, PodUID

#: ``entries_on(node)``: the ledger's entries on a node.
EntriesOn = Callable[[NodeName], Iterable[Allocation]]
#: ``owner_alive(pod_uid) -> bool``: False frees the pod's slot at once (its pod is gone).
OwnerAlive = Callable[[str], bool]


class LeaseTimeout(Exception):
    """The handoff slots could not be had within the bind budget."""

    def __init__(self, slot: str, holder: str | None) -> None:
        super().__init__(f"Allocate handoff slot {slot} is still held by pod {holder or '?'}")
        self.slot = slot
        self.holder = holder


def slot_name(node: str, size: int) -> str:
    """How a slot is named in errors and logs (the old lease key's shape)."""
    return f"{node}/{size}"


def slot_holder(entries: Iterable[Allocation], size: int, pod: PodUID, alive: OwnerAlive,
                served: Container[str] = frozenset()) -> PodUID | None:
    """The other pod that holds the ``size`` slot among one node's ``entries``: DECIDED (Allocate has
    not served it yet), with a GPU container of ``size`` devices, alive, and not in ``served`` (its
    node-agent said Allocate served it; the entry's APPLIED write is on its way). None: free."""
    for entry in entries:
        if (entry.pod_uid != pod and entry.state is AllocationState.DECIDED
                and size in device_counts(entry.devices) and entry.pod_uid not in served
                and alive(entry.pod_uid)):
            return entry.pod_uid
    return None


class HandoffSlots:
    """Waits for a bind's slots on the leader's ledger."""

    def __init__(self, entries_on: EntriesOn, *, owner_alive: OwnerAlive) -> None:
        self._entries_on = entries_on
        self._owner_alive = owner_alive
        self._queues: dict[tuple[str, int], asyncio.Lock] = {}
        """slot -> the FIFO of this process's binds for it; its holder is the one that may decide."""
        self._waiters: dict[str, set[asyncio.Event]] = {}
        """node -> the events of the binds at the head of a queue, waiting for the ledger."""
        self._served: set[str] = set()
        """Pods whose ``allocation.applied`` (complete) came, while their entry's APPLIED write runs."""

    def wake(self, node: NodeName | None = None) -> None:
        """Re-check waiters (for one node, or all): the ledger changed there."""
        groups = self._waiters.values() if node is None else [self._waiters.get(node, set())]
        for group in groups:
            for event in group:
                event.set()

    def holder(self, node: NodeName, size: int, pod: PodUID) -> PodUID | None:
        """Who holds ``pod``'s ``size`` slot on ``node`` by the ledger now (None: free)."""
        return slot_holder(self._entries_on(node), size, pod, self._owner_alive, self._served)

    @contextlib.contextmanager
    def served(self, pod: PodUID, node: NodeName) -> Iterator[None]:
        """While the entry of ``pod`` (whose node-agent said Allocate served it) is written APPLIED:
        its slots are free at once, not one KV round trip later. Only this process's view: a new
        leader finds the entry DECIDED and waits for the replayed verdict (safe, and rare)."""
        self._served.add(pod)
        self.wake(node)
        try:
            yield
        finally:
            self._served.discard(pod)

    async def acquire(self, node: NodeName, sizes: Iterable[int], pod: PodUID,
                      deadline: float) -> list[asyncio.Lock]:
        """Wait until every slot of ``sizes`` (ascending: no deadlock between two pods needing
        several) is free for ``pod``; returns them held, for :meth:`release`. ``LeaseTimeout`` at
        ``deadline`` (monotonic), with nothing held."""
        held: list[asyncio.Lock] = []
        try:
            for size in sorted(set(sizes)):
                held.append(await self._acquire_one(node, size, pod, deadline))
        except BaseException:
            self.release(held)
            raise
        return held

    def release(self, held: Iterable[asyncio.Lock]) -> None:
        """Let the next local bind of each slot look (the ledger now shows this one's entry)."""
        for queue in held:
            queue.release()

    async def _acquire_one(self, node: NodeName, size: int, pod: PodUID, deadline: float) -> asyncio.Lock:
        queue = self._queues.setdefault((node, size), asyncio.Lock())
        try:
            # asyncio.timeout, not wait_for: no extra task per bind when the queue is free
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                await queue.acquire()
        except TimeoutError:
            raise LeaseTimeout(slot_name(node, size), None) from None
        try:
            await self._wait_free(node, size, pod, deadline)
        except BaseException:
            queue.release()
            raise
        return queue

    async def _wait_free(self, node: NodeName, size: int, pod: PodUID, deadline: float) -> None:
        holder = self.holder(node, size, pod)
        if holder is None:
            return
        event = asyncio.Event()
        group = self._waiters.setdefault(node, set())
        group.add(event)
        try:
            while holder is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LeaseTimeout(slot_name(node, size), holder)
                event.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await event.wait()
                holder = self.holder(node, size, pod)
        finally:
            group.discard(event)
            if not group:
                self._waiters.pop(node, None)
