"""The I/O shell around the ledger: load inventory and allocations from KV, then follow them live.

At start it reads both buckets in one bulk pass each (no per-key requests), then watches them from
the snapshot's revision so nothing falls in between, and follows ``gpubus.inventory.>`` heartbeats.
Only then is it ``ready``: a restarted scheduler is correct from its first filter call. Each entry,
loaded or watched, is decoded by the shared rule (:func:`shared.kv_reading.decode_one`) one at a
time rather than through the bulk reader: an entry no newer than the ledger's (the echo of its own
write) is not decoded at all, and a skipped entry is counted by ``kind`` (key mismatch or not).

It is also the only writer of the ``allocations`` bucket (used by the leader): every write is applied
to the in-memory ledger with the revision NATS returned, so the watch's echo of it changes nothing.
While its term lasts the leader does not follow the bucket at all (:meth:`follow_own_writes`): no
echo reaches it. The only other writes then possible are a deposed leader's late APPLIED updates
and releases (its decisions are fenced); each only makes this ledger count more than KV holds, and
:meth:`follow_ledger` replays them, from where the watch stopped, once the term ends.

The leader's term lives in the same bucket (``TERM_KEY``, :meth:`begin_term`): a new leader bumps it
and waits until its watch has delivered that revision, so its ledger holds every decision the stream
accepted before (the ordered watch delivers the bucket in stream order). Each DECIDED entry is then
written fenced on the term: JetStream stores it only while the term key is still at this leader's
revision, so a deposed leader that still believes it leads decides nothing (docs/services/scheduler.md,
"Fencing").

Must not know HTTP, Kubernetes or the Fit engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from services.scheduler.ledger import STALE_HEARTBEATS, Ledger, NodeInventory
from shared.bus import ALLOCATIONS, INVENTORY, KV, Bus, Entry, Subscription, Watch
from shared.errors import BusUnavailable, CasConflict, EventDecodeError, Fenced
from shared.events import AllocationDecided, AllocationReleased, Event, Inventory
from shared.inventory_entries import decode_inventory_entry
from shared.kv_reading import decode_one
from shared.ledger_entries import (
    TERM_KEY,
    KeyMismatch,
    decode_allocation,
    decode_entry,
    encode_allocation,
    is_entry_key,
)
from shared.model import Allocation, AllocationState, NodeName, PodUID

log = logging.getLogger(__name__)

__all__ = ["ChangeCallback", "State", "decode_allocation", "encode_allocation"]

#: ``on_change(node)``: something about this node's allocations changed (wakes lease waiters).
ChangeCallback = Callable[[NodeName], None]
#: ``on_input_error(source, kind)``, e.g. ``("kv/allocations", "key_mismatch")``.
InputErrorCallback = Callable[[str, str], None]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic GC for a bulk load: 100k entries allocate about a million objects that all
    stay alive, and each collection the allocations trigger walks them all to free nothing
    (a third of the cold start). Reference counting still frees everything it can."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _skip_kind(error: EventDecodeError) -> str:
    """The ``kind`` label of a skipped KV entry: one under another's key, or one not decodable."""
    return "key_mismatch" if isinstance(error, KeyMismatch) else "undecodable"


def _came_back(held: NodeInventory | None, event: Inventory, now: float) -> bool:
    """The node was unplaceable (unknown, stale, or a card unhealthy that is healthy now)."""
    if held is None or held.stale(now):
        return True
    sick = {d.id for d in held.devices if not d.health}
    return any(d.health for d in event.devices if d.id in sick)


class State:
    """Keeps a :class:`Ledger` equal to KV; writes the ledger for the leader."""

    def __init__(
        self,
        bus: Bus,
        ledger: Ledger,
        *,
        clock: Callable[[], float] = time.time,
        on_change: ChangeCallback | None = None,
        on_input_error: InputErrorCallback = lambda source, kind: None,
        on_node_back: Callable[[NodeName], None] = lambda node: None,
    ) -> None:
        self.bus = bus
        self._on_node_back = on_node_back
        """A node became placeable again: its inventory arrived after none, or after it went stale,
        or a card of it turned healthy (kube-scheduler cannot see this; see requeue.py)."""
        self.ledger = ledger
        self._clock = clock
        self._on_change = on_change
        self._on_input_error = on_input_error
        """Called for every KV entry or event that cannot be used (counted by source and kind)."""
        self._allocations: KV | None = None
        self._inventory: KV | None = None
        self._watches: list[Watch] = []
        self._ledger_watch: Watch | None = None
        """The ``allocations`` watch; None while this replica leads (see :meth:`follow_own_writes`)."""
        self._ledger_seen = 0
        """The newest revision of the bucket the load or the watch delivered (a resumed watch goes on
        after it)."""
        self._deleting: set[PodUID] = set()
        """Pods whose delete this replica is writing: the watch's echo of it leaves their entry to
        :meth:`release` (which emits the release), as it may arrive before the delete returns."""
        self._follow_lock = asyncio.Lock()
        """One change of following at a time (the sweep's retry against an election's)."""
        self.ledger_deliveries = 0
        """Messages the ``allocations`` watch delivered (a leader's stays still: no echoes)."""
        self._subscription: Subscription | None = None
        self.term: int | None = None
        """This replica's term (the term key's revision it wrote) while it leads; None otherwise."""
        self._term_seen = 0
        """The newest revision of the term key the load or the watch delivered."""
        self._term_moved = asyncio.Event()
        self._term_begun = asyncio.Event()
        self.ready = False
        self.loaded_in_s = 0.0

    # --- start and stop --------------------------------------------------------------------

    async def load(self) -> None:
        """Bulk-load both buckets, then follow them and the inventory heartbeats."""
        started = time.perf_counter()
        self._inventory = await self.bus.kv(INVENTORY)
        self._allocations = await self.bus.kv(ALLOCATIONS)
        inv = await self._inventory.snapshot()
        now = self._clock()
        for node, entry in inv.entries.items():
            self._on_inventory_entry(NodeName(node), entry, loaded_at=now)
        allocs = await self._allocations.snapshot()
        self._ledger_seen = allocs.revision
        with _collector_paused():
            for uid, entry in allocs.entries.items():
                if is_entry_key(uid):
                    self._on_allocation_entry(uid, entry)
                else:
                    self._note_term(entry.revision)
        self._watches.append(
            await self._inventory.watch(self._watch_inventory, start_revision=inv.revision + 1)
        )
        await self.follow_ledger()
        self._subscription = await self.bus.subscribe(
            "gpubus.inventory.>", self._on_event, deliver="last_per_subject"
        )
        self.loaded_in_s = time.perf_counter() - started
        self.ready = True
        log.info(
            "state loaded in %.2fs: %d nodes, %d ledger entries",
            self.loaded_in_s,
            len(self.ledger.nodes()),
            len(self.ledger),
        )

    async def close(self) -> None:
        self.ready = False
        if self._subscription is not None:
            await self._subscription.stop()
        for w in self._watches:
            await w.stop()
        self._watches.clear()
        await self._stop_ledger_watch()

    # --- following -------------------------------------------------------------------------

    def _on_inventory_entry(self, node: NodeName, entry: Entry, *, loaded_at: float | None = None) -> None:
        event = decode_one(INVENTORY, node, entry.value, decode_inventory_entry, self._skipped_inventory)
        if event is not None:
            self.set_inventory(node, event, loaded_at=loaded_at, source=f"kv/{INVENTORY}")

    def _skipped_inventory(self, key: str, error: EventDecodeError) -> None:
        self._on_input_error(f"kv/{INVENTORY}", _skip_kind(error))

    def set_inventory(
        self,
        node: NodeName,
        event: Inventory,
        *,
        loaded_at: float | None = None,
        source: str = "events/inventory",
    ) -> None:
        """Newer content or a newer heartbeat replaces what is held; an older one is ignored.

        A time ahead of this scheduler's clock counts as now: one inventory stamped far in the
        future (a bad clock, or bad input) would otherwise make every later one look older. An
        inventory listing a device twice is refused: Fit would give the same card out twice.
        """
        if len({d.id for d in event.devices}) != len(event.devices):
            self._input_error(
                source, "duplicate_device", f"inventory of {node} lists a device twice; ignored"
            )
            return
        seen = min(event.ts, self._clock())
        if loaded_at is not None:
            # KV holds the last content, not the last heartbeat: give a loaded node one interval
            # to prove it is alive instead of calling every node stale at start.
            seen = max(seen, loaded_at - (STALE_HEARTBEATS - 1) * event.heartbeat_s)
        held = self.ledger.inventory(node)
        if held is not None and seen < held.seen_at and event.generation <= held.generation:
            return
        back = loaded_at is None and _came_back(held, event, self._clock())
        self.ledger.set_inventory(
            node,
            NodeInventory(
                devices=event.devices,
                seen_at=seen,
                heartbeat_s=event.heartbeat_s,
                generation=event.generation,
            ),
        )
        if back:
            self._on_node_back(node)

    async def _watch_inventory(self, key: str, entry: Entry | None) -> None:
        if entry is None:
            self.ledger.remove_node(NodeName(key))
        else:
            self._on_inventory_entry(NodeName(key), entry)

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, Inventory) and event.node:
            self.set_inventory(NodeName(event.node), event)

    def _on_allocation_entry(self, key: str, entry: Entry) -> None:
        held = self.ledger.revision(PodUID(key))
        if held is not None and held >= entry.revision:
            return  # the echo of our own write (or older): nothing to decode
        allocation = decode_one(ALLOCATIONS, key, entry.value, decode_entry, self._skipped_allocation)
        if allocation is not None and self.ledger.apply(allocation, entry.revision):
            self._changed(allocation.node)

    def _skipped_allocation(self, key: str, error: EventDecodeError) -> None:
        self._on_input_error(f"kv/{ALLOCATIONS}", _skip_kind(error))

    def _input_error(self, source: str, kind: str, message: str) -> None:
        self._on_input_error(source, kind)
        log.warning("%s", message)

    async def follow_ledger(self) -> None:
        """Follow the ``allocations`` bucket from the revision after the last one delivered (at
        load, and when a term ends: what the leader did not see while it led is replayed)."""
        async with self._follow_lock:
            if self._ledger_watch is None:
                self._ledger_watch = await self._kv().watch(self._watch_allocations,
                                                            start_revision=self._ledger_seen + 1,
                                                            tombstones=self._on_tombstone)

    async def follow_own_writes(self) -> None:
        """Stop following the bucket: the leader, in its term, is its only writer (every decision is
        fenced on the term), and applies each write it makes itself, so the watch would bring it
        nothing but the echoes of its own writes (three a pod). :meth:`follow_ledger` resumes it."""
        await self._stop_ledger_watch()

    async def _stop_ledger_watch(self) -> None:
        async with self._follow_lock:
            watch, self._ledger_watch = self._ledger_watch, None
            if watch is not None:
                await watch.stop()

    async def _watch_allocations(self, key: str, entry: Entry | None) -> None:
        self.ledger_deliveries += 1
        if entry is None:
            return  # a delete marker: _on_tombstone has dropped the entry it deletes
        self._ledger_seen = max(self._ledger_seen, entry.revision)
        if not is_entry_key(key):
            self._note_term(entry.revision)
            return
        self._on_allocation_entry(key, entry)

    def _on_tombstone(self, key: str, revision: int) -> None:
        """A delete marker at ``revision``: drop the entry only if it is older. A newer entry (the
        pod decided again after the delete this marks) and a reservation (revision 0: a decision
        of this replica not stored yet) stay; so does the entry of a delete this replica is
        writing (its echo can come first), and the echo of one it wrote has nothing left to drop."""
        self._ledger_seen = max(self._ledger_seen, revision)
        uid = PodUID(key)
        if uid in self._deleting or self.ledger.revision(uid) == 0:
            return
        removed = self.ledger.delete(uid, revision)  # None when there is none, or a newer one
        if removed is not None:
            self._changed(removed.node)

    def _changed(self, node: NodeName) -> None:
        if self._on_change is not None:
            self._on_change(node)

    def _note_term(self, revision: int) -> None:
        if revision > self._term_seen:
            self._term_seen = revision
            self._term_moved.set()

    # --- the term (leader only) ------------------------------------------------------------

    async def begin_term(self, holder: str, *, within_s: float) -> int:
        """Bump the term key (compare-and-set over what it holds), then wait until the ledger holds
        every message of the bucket up to the new revision; returns it (the term).

        Any decision of an earlier term was either stored before the bump (and is in the ledger
        once this returns) or is refused by the store from now on. ``BusUnavailable`` when the watch
        does not deliver the bump within ``within_s`` (the caller steps down and campaigns again).
        """
        self.end_term()
        await self.follow_ledger()  # the bump is awaited on the watch (resumed if a term paused it)
        kv = self._kv()
        while True:
            held = await kv.get(TERM_KEY)
            try:
                if held is None:
                    revision = await kv.create(TERM_KEY, holder.encode())
                else:
                    revision = await kv.update(TERM_KEY, holder.encode(), last=held.revision)
                break
            except CasConflict:
                continue  # another replica bumped it between the read and the write: bump over it
        try:
            async with asyncio.timeout(within_s):
                while self._term_seen < revision:
                    self._term_moved.clear()
                    await self._term_moved.wait()
        except TimeoutError:
            raise BusUnavailable(f"the ledger watch did not deliver term {revision} "
                                 f"within {within_s:.0f}s") from None
        self.term = revision
        self._term_begun.set()
        return revision

    def end_term(self) -> None:
        """Stop deciding: this replica no longer leads."""
        self.term = None
        self._term_begun.clear()

    async def in_term(self, within_s: float) -> bool:
        """Wait (at most ``within_s``) until this replica holds a term; whether it does. A new
        leader's first binds wait here while it bumps the term and reads the ledger up to it."""
        if self.term is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within_s):
                    await self._term_begun.wait()
        return self.term is not None

    # --- writing (leader only) -------------------------------------------------------------

    def _kv(self) -> KV:
        if self._allocations is None:
            raise BusUnavailable("state not loaded")
        return self._allocations

    async def write(self, allocation: Allocation, *, fenced: bool = False) -> int:
        """Put the entry in KV and in the ledger (at the revision KV gave it).

        ``fenced``: stored only within this replica's term (``Fenced`` outside one, or when a newer
        term began): the write of a DECIDED entry. It checks nothing about the pod's own key: the
        leader is the only writer of DECIDED entries, binds one pod at a time (``Binder._in_flight``)
        and holds the ledger in memory, so there is no concurrent writer of that key to lose to.
        """
        if not fenced:
            revision = await self._kv().put(allocation.pod_uid, encode_allocation(allocation))
        elif self.term is None:
            raise Fenced("this replica holds no term: it does not lead")
        else:
            revision = await self._kv().put(allocation.pod_uid, encode_allocation(allocation),
                                            fence=(TERM_KEY, self.term))
        self.ledger.apply(allocation, revision)
        self._changed(allocation.node)
        return revision

    async def decide(self, allocation: Allocation) -> int:
        """Write a DECIDED entry, fenced on this replica's term, then publish ``allocation.decided``
        (both before the Binding). ``Fenced``: the store refused it, nothing was written or sent.

        The event waits for the entry's ack: a decision the store refused (a deposed leader's) must
        never reach a node-agent, whose Allocate would serve it. In order with the releases emitted
        before it: the event stream never shows a decision ahead of the release that freed its
        capacity. If the event fails, the caller releases (the release is queued behind it).
        """
        decided = replace(allocation, state=AllocationState.DECIDED, expires_at=0.0)
        revision = await self.write(decided, fenced=True)
        await self.bus.publish_in_order(AllocationDecided(allocation=decided, node=decided.node))
        return revision

    async def set_state(self, uid: PodUID, state: AllocationState) -> Allocation | None:
        """Move an entry to ``state`` (compare-and-set against its revision; retried once on a race)."""
        for _ in range(2):
            held = self.ledger.entry(uid)
            revision = self.ledger.revision(uid)
            if held is None or revision is None or held.state is state:
                return None
            updated = replace(held, state=state)
            try:
                new_rev = await self._kv().update(uid, encode_allocation(updated), last=revision)
            except CasConflict:
                entry = await self._kv().get(uid)
                if entry is not None:
                    self._on_allocation_entry(uid, entry)
                continue
            self.ledger.apply(updated, new_rev)
            self._changed(updated.node)
            return updated
        return None

    async def adopt(self, allocation: Allocation) -> bool:
        """Create an entry only if the pod has none in KV (migration from HAMi, missed writes).

        One it has is read into the ledger: a leader does not follow the bucket, and the entry may
        be a deposed leader's adoption of the same pod."""
        try:
            revision = await self._kv().create(allocation.pod_uid, encode_allocation(allocation))
        except CasConflict:
            entry = await self._kv().get(allocation.pod_uid)
            if entry is not None:
                self._on_allocation_entry(allocation.pod_uid, entry)
            return False
        self.ledger.apply(allocation, revision)
        self._changed(allocation.node)
        return True

    async def release(self, uid: PodUID, why: str) -> Allocation | None:
        """Drop the entry here and in KV and publish ``allocation.released``; None if there was none."""
        # The capacity is freed only once KV has the delete, and the release is emitted in the
        # same step: a decision that reuses the capacity is queued, and stored, after it.
        self._deleting.add(uid)
        try:
            await self._kv().delete(uid)
        finally:
            self._deleting.discard(uid)
        held = self.ledger.delete(uid)
        if held is None:
            return None
        self._changed(held.node)
        self.bus.emit(
            AllocationReleased(pod_uid=uid, namespace=held.namespace, name=held.name, why=why, node=held.node)
        )
        return held
