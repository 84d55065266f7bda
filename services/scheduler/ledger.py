"""The scheduler's in-memory picture of the cluster: node inventories and the allocation ledger.

Owns, per node, the device inventory (from ``inventory`` events/KV) and, per device, the usage
derived from ledger entries (KV ``allocations``) plus in-process reservations (decisions made
at bind but not yet written), and per namespace the MiB and cores its pods hold (ResourceQuota).
Every change is O(devices of one pod): an entry's contribution is remembered so that releasing
it subtracts exactly what applying it added; nothing is rebuilt per filter call. Each node
carries a ``version`` that changes whenever its inventory or usage does, so callers may cache
per-node results.

Revisions make replays harmless: a KV watch may deliver an entry the leader already applied
locally, or an older revision after a newer one; an entry or tombstone older than what is
held is ignored.

Pure: no I/O, no clock reads (``now`` is passed in), no asyncio. Must not know NATS, HTTP,
Kubernetes or the Fit engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from shared.annotations import collapse_usage
from shared.model import (
    Allocation,
    AllocationState,
    DeviceInfo,
    DeviceUsage,
    DeviceUUID,
    MigPlacement,
    NodeName,
    PodUID,
)

#: A node is stale when its inventory has not been refreshed for this many heartbeat intervals.
STALE_HEARTBEATS = 3.0
#: Entries in these states hold no device usage.
_FREE_STATES = frozenset({AllocationState.FAILED})
_ZERO = DeviceUsage()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInventory:
    """The devices a node registered and when we last heard from it."""

    devices: tuple[DeviceInfo, ...]
    seen_at: float
    heartbeat_s: float = 30.0
    generation: int = 0

    @property
    def stale_at(self) -> float:
        """The time after which the node counts as stale (infinity when it sends no heartbeats)."""
        if self.heartbeat_s <= 0:
            return math.inf
        return self.seen_at + STALE_HEARTBEATS * self.heartbeat_s

    def stale(self, now: float) -> bool:
        return now > self.stale_at


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSnapshot:
    """One node as Fit sees it: devices and their usage in inventory order, plus its version."""

    name: NodeName
    devices: tuple[DeviceInfo, ...]
    usage: tuple[DeviceUsage, ...]
    annotations: dict[str, str]
    version: int


@dataclass(frozen=True, slots=True)
class _Held:
    allocation: Allocation
    revision: int
    """KV revision of the entry; 0 for an in-process reservation."""


class Ledger:
    """Inventory + allocation ledger + reservations, with incrementally maintained usage."""

    def __init__(self) -> None:
        self._inventory: dict[NodeName, NodeInventory] = {}
        self._usage: dict[NodeName, dict[DeviceUUID, list[int]]] = {}
        self._mig: dict[NodeName, dict[DeviceUUID, list[MigPlacement]]] = {}
        """MIG placements the entries hold, per node and card (a multiset: one per instance)."""
        self._held: dict[PodUID, _Held] = {}
        self._by_node: dict[NodeName, set[PodUID]] = {}
        self._versions: dict[NodeName, int] = {}
        self._annotations: dict[NodeName, dict[str, str]] = {}
        self._feeds: list[set[NodeName]] = []
        self._namespaces: dict[str, list[int]] = {}

    # --- inventory -------------------------------------------------------------------------

    def set_inventory(self, node: NodeName, inventory: NodeInventory) -> None:
        """Replace a node's inventory; a heartbeat with unchanged devices only refreshes ``seen_at``."""
        old = self._inventory.get(node)
        self._inventory[node] = inventory
        if old is None or old.devices != inventory.devices:
            self._touch(node)
        elif inventory.stale_at < old.stale_at:
            self._notify(node)  # same content, but it may turn stale sooner than a cache assumed

    def remove_node(self, node: NodeName) -> bool:
        """Forget a node's inventory and annotations (its ledger entries stay until their pods go)."""
        self._annotations.pop(node, None)
        if self._inventory.pop(node, None) is None:
            return False
        self._touch(node)
        return True

    def set_annotations(self, node: NodeName, annotations: dict[str, str]) -> None:
        """The node's Kubernetes annotations that Fit reads (device cordon, topology scores)."""
        if self._annotations.get(node, {}) != annotations:
            self._annotations[node] = annotations
            self._touch(node)

    def inventory(self, node: NodeName) -> NodeInventory | None:
        return self._inventory.get(node)

    def nodes(self) -> list[NodeName]:
        return list(self._inventory)

    def __contains__(self, node: object) -> bool:
        return node in self._inventory

    # --- ledger entries --------------------------------------------------------------------

    def apply(self, allocation: Allocation, revision: int) -> bool:
        """Upsert the ledger entry at KV ``revision``; False (and no change) if it is older than held."""
        held = self._held.get(allocation.pod_uid)
        if held is not None and (held.revision > revision or (revision and held.revision == revision)):
            return False
        self._put(allocation, revision)
        return True

    def delete(self, uid: PodUID, revision: int | None = None) -> Allocation | None:
        """Drop an entry (a tombstone at ``revision``, or a local release when None); returns it."""
        held = self._held.get(uid)
        if held is None or (revision is not None and held.revision > revision):
            return None
        self._drop(uid)
        return held.allocation

    def reserve(self, allocation: Allocation, expires_at: float) -> None:
        """Hold a decision in process until its ledger entry is written (or ``expires_at`` passes)."""
        self._put(replace(allocation, state=AllocationState.RESERVED, expires_at=expires_at), 0)

    def expire(self, now: float) -> list[Allocation]:
        """Drop reservations whose time has passed; returns them."""
        lapsed = [
            h.allocation
            for h in self._held.values()
            if h.revision == 0
            and h.allocation.state is AllocationState.RESERVED
            and h.allocation.expires_at <= now
        ]
        for a in lapsed:
            self._drop(a.pod_uid)
        return lapsed

    def entry(self, uid: PodUID) -> Allocation | None:
        held = self._held.get(uid)
        return None if held is None else held.allocation

    def revision(self, uid: PodUID) -> int | None:
        held = self._held.get(uid)
        return None if held is None else held.revision

    def entries(self) -> Iterator[Allocation]:
        return (h.allocation for h in self._held.values())

    def namespace_usage(self, namespace: str) -> tuple[int, int]:
        """(MiB, cores) the namespace's entries hold, each pod collapsed as HAMi does (ResourceQuota)."""
        cur = self._namespaces.get(namespace)
        return (0, 0) if cur is None else (cur[0], cur[1])

    def pod_usage(self, uid: PodUID) -> tuple[int, int]:
        """(MiB, cores) one pod's entry holds, collapsed; (0, 0) without an entry or when FAILED."""
        held = self._held.get(uid)
        if held is None or held.allocation.state in _FREE_STATES:
            return (0, 0)
        use = collapse_usage(held.allocation.devices, held.allocation.init_count).values()
        return (sum(u.usedmem for u in use), sum(u.usedcores for u in use))

    def namespaces(self) -> list[str]:
        """Namespaces that hold device usage."""
        return list(self._namespaces)

    def entries_on(self, node: NodeName) -> list[Allocation]:
        return [self._held[uid].allocation for uid in self._by_node.get(node, ())]

    def __len__(self) -> int:
        return len(self._held)

    # --- views -----------------------------------------------------------------------------

    def change_feed(self) -> set[NodeName]:
        """A set this ledger adds every node to whose devices, usage or annotations change, or whose
        staleness deadline moves earlier; the caller empties it after reading (per-node caches)."""
        feed: set[NodeName] = set()
        self._feeds.append(feed)
        return feed

    def version(self, node: NodeName) -> int:
        return self._versions.get(node, 0)

    def usage(self, node: NodeName, uuid: DeviceUUID) -> DeviceUsage:
        cur = self._usage.get(node, {}).get(uuid)
        if cur is None:
            return _ZERO
        mig = self._mig.get(node, {}).get(uuid, ()) if self._mig else ()
        return DeviceUsage(used=cur[0], usedmem=cur[1], usedcores=cur[2], mig=tuple(mig))

    def snapshot(self, node: NodeName) -> NodeSnapshot | None:
        """The node's devices with their usage (callers cache it by ``version``); None if unregistered."""
        inv = self._inventory.get(node)
        if inv is None:
            return None
        usage = tuple(self.usage(node, d.id) for d in inv.devices)
        return NodeSnapshot(
            name=node,
            devices=inv.devices,
            usage=usage,
            annotations=self._annotations.get(node, {}),
            version=self._versions.get(node, 0),
        )

    # --- internals -------------------------------------------------------------------------

    def _put(self, allocation: Allocation, revision: int) -> None:
        uid = allocation.pod_uid
        held = self._held.get(uid)
        if held is not None and _same_usage(held.allocation, allocation):
            # RESERVED -> DECIDED -> APPLIED keep the same devices: the node's usage, version and
            # every per-node cache built on them stay valid
            self._held[uid] = _Held(allocation, revision)
            return
        if held is not None:
            self._drop(uid)
        self._held[uid] = _Held(allocation, revision)
        self._by_node.setdefault(allocation.node, set()).add(uid)
        self._add(allocation, 1)

    def _drop(self, uid: PodUID) -> None:
        held = self._held.pop(uid)
        on_node = self._by_node.get(held.allocation.node)
        if on_node is not None:
            on_node.discard(uid)
            if not on_node:
                del self._by_node[held.allocation.node]
        self._add(held.allocation, -1)

    def _add(self, allocation: Allocation, sign: int) -> None:
        """Add (or with ``sign`` -1 subtract) an entry's collapsed usage; deterministic, so the
        subtraction undoes the addition exactly without storing it (memory at 100k entries)."""
        node = allocation.node
        if allocation.state not in _FREE_STATES:
            devices = self._usage.setdefault(node, {})
            total_mem = total_cores = 0
            for uuid, used, mem, cores in _contributions(allocation):
                cur = devices.get(uuid)
                if cur is None:
                    cur = devices[uuid] = [0, 0, 0]
                cur[0] += sign * used
                cur[1] += sign * mem
                cur[2] += sign * cores
                total_mem += mem
                total_cores += cores
                if cur == [0, 0, 0]:
                    del devices[uuid]
            if not devices:
                del self._usage[node]
            self._add_mig(allocation, sign)
            self._add_namespace(allocation.namespace, sign * total_mem, sign * total_cores)
        self._touch(node)

    def _add_mig(self, allocation: Allocation, sign: int) -> None:
        node = allocation.node
        for slot in allocation.devices:
            for d in slot:
                if d.mig is None:
                    continue
                cards = self._mig.setdefault(node, {})
                held = cards.setdefault(d.uuid, [])
                if sign > 0:
                    held.append(d.mig.placement)
                elif d.mig.placement in held:
                    held.remove(d.mig.placement)
                if not held:
                    del cards[d.uuid]
                if not cards:
                    del self._mig[node]

    def _add_namespace(self, namespace: str, mem: int, cores: int) -> None:
        cur = self._namespaces.get(namespace)
        if cur is None:
            cur = self._namespaces[namespace] = [0, 0]
        cur[0] += mem
        cur[1] += cores
        if cur == [0, 0]:
            del self._namespaces[namespace]

    def _touch(self, node: NodeName) -> None:
        self._versions[node] = self._versions.get(node, 0) + 1
        self._notify(node)

    def _notify(self, node: NodeName) -> None:
        for feed in self._feeds:
            feed.add(node)


def _same_usage(a: Allocation, b: Allocation) -> bool:
    """Whether two entries of one pod add exactly the same usage to the same node and namespace."""
    return (
        a.node == b.node
        and a.namespace == b.namespace
        and a.init_count == b.init_count
        and (a.state in _FREE_STATES) == (b.state in _FREE_STATES)
        and a.devices == b.devices
    )


def _contributions(allocation: Allocation) -> Iterator[tuple[DeviceUUID, int, int, int]]:
    """(uuid, slots, MiB, cores) an entry adds. Without init containers the collapse is a plain sum
    per device, so each card is added as it comes (cheaper: a cold start applies 100k entries)."""
    if allocation.init_count:
        for uuid, u in collapse_usage(allocation.devices, allocation.init_count).items():
            yield uuid, u.used, u.usedmem, u.usedcores
        return
    for slot in allocation.devices:
        for d in slot:
            yield d.uuid, 1, d.usedmem, d.usedcores
