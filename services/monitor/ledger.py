"""The monitor's view of the allocation ledger for one node: who runs here and with what slice.

Rebuilt from the ``allocations`` KV bucket on start and kept current by ``allocation.decided``
and ``allocation.released`` events; it also keeps the node's registered devices (``inventory``)
for labelling. This module only holds and queries that state (no I/O beyond a log line).
Limits are the decided slice, in bytes (the model's MiB x 2^20).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from services.monitor.readings import MAX_BYTES
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceInfo

log = logging.getLogger(__name__)

MIB = 1 << 20

#: Ledger states in which the pod's containers may be running.
ACTIVE_STATES = frozenset({AllocationState.DECIDED, AllocationState.APPLIED})


@dataclass(frozen=True, slots=True, kw_only=True)
class Slice:
    """What one container was given on one device."""

    uuid: str
    vindex: int
    limit_bytes: int
    cores: int
    index: int
    """Device index on the node."""
    type: str


class Ledger:
    """Allocations of one node, keyed by pod UID. ``synced`` is True once rebuilt from KV."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.synced = False
        self._by_uid: dict[str, Allocation] = {}
        self._slices: dict[tuple[str, str], tuple[Slice, ...]] = {}
        self.devices: tuple[DeviceInfo, ...] = ()
        """The node's devices as last registered (empty until an inventory is seen)."""
        self.bad_limits = 0
        """Slices refused a limit because ``usedmem`` x 2^20 is no byte count (counted per apply)."""

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, pod_uid: object) -> bool:
        return pod_uid in self._by_uid

    def replace_all(self, allocations: Iterable[Allocation]) -> None:
        """Level-triggered rebuild from a KV snapshot (entries of other nodes are ignored)."""
        self._by_uid.clear()
        self._slices.clear()
        for allocation in allocations:
            self.apply(allocation)
        self.synced = True

    def apply(self, allocation: Allocation) -> bool:
        """Record a decision; False (ignored) when it is for another node."""
        if allocation.node != self.node:
            return False
        self.release(allocation.pod_uid)
        self._by_uid[allocation.pod_uid] = allocation
        for name, devices in zip(allocation.containers, allocation.devices, strict=False):
            self._slices[(allocation.pod_uid, name)] = tuple(
                Slice(
                    uuid=d.uuid,
                    vindex=i,
                    limit_bytes=self._limit(allocation, name, d),
                    cores=d.usedcores,
                    index=d.idx,
                    type=d.type,
                )
                for i, d in enumerate(devices)
            )
        return True

    def _limit(self, allocation: Allocation, container: str, d: ContainerDevice) -> int:
        """The slice in bytes; 0 ("the ledger does not say": the source's own figure is used) when
        it cannot be a byte count, which would make every ``usage.sample`` of the node unencodable."""
        limit = d.usedmem * MIB
        if 0 <= limit <= MAX_BYTES:
            return limit
        self.bad_limits += 1
        log.warning(
            "ignoring the memory limit of %s/%s %s on %s: %d MiB is not a byte count",
            allocation.namespace,
            allocation.name,
            container,
            d.uuid,
            d.usedmem,
        )
        return 0

    def release(self, pod_uid: str) -> bool:
        allocation = self._by_uid.pop(pod_uid, None)
        if allocation is None:
            return False
        for name in allocation.containers:
            self._slices.pop((pod_uid, name), None)
        return True

    def get(self, pod_uid: str) -> Allocation | None:
        return self._by_uid.get(pod_uid)

    def active(self) -> Iterator[Allocation]:
        return (a for a in self._by_uid.values() if a.state in ACTIVE_STATES)

    def pod_uids(self) -> frozenset[str]:
        return frozenset(self._by_uid)

    def slices(self, pod_uid: str, container: str) -> tuple[Slice, ...]:
        return self._slices.get((pod_uid, container), ())

    def limit_bytes(self, pod_uid: str, container: str, uuid: str) -> int:
        """The container's memory slice on ``uuid`` in bytes; 0 when the ledger does not say."""
        for s in self._slices.get((pod_uid, container), ()):
            if s.uuid == uuid:
                return s.limit_bytes
        return 0

    def container_on(self, pod_uid: str, uuid: str) -> str | None:
        """The one container of the pod holding a slice of ``uuid``; None if none or several."""
        allocation = self._by_uid.get(pod_uid)
        if allocation is None:
            return None
        found = [
            name
            for name, devices in zip(allocation.containers, allocation.devices, strict=False)
            if any(d.uuid == uuid for d in devices)
        ]
        return found[0] if len(found) == 1 else None
