"""Releasing the Allocate ambiguity leases of a pod once this node is done with its decision.

The scheduler takes one lease ``alloc.<node>.<n>`` per distinct per-container device count of a pod
(:mod:`shared.handoff`) before binding it, so that the kubelet's Allocate calls on a node are never
ambiguous. The node-agent releases them when Allocate has run for the pod (or its decision ended).
A decision names the revisions the scheduler holds them at: the release is a compare-and-delete at
that revision; a NATS outage is retried until the lease's own TTL would have ended it anyway.

Must not know the kubelet, the advertised devices or HTTP.
"""

from __future__ import annotations

import asyncio
import logging

from services.node_agent.metrics import NodeAgentMetrics
from shared.bus import Bus, Lease
from shared.errors import BusUnavailable
from shared.events import AllocationDecided
from shared.handoff import device_counts, lease_key
from shared.model import Allocation, PodUID

log = logging.getLogger(__name__)

#: Wait between tries of a release while NATS is unavailable, seconds.
_RETRY_S = 1.0


class LeaseReleaser:
    """Keeps the lease revisions each decision for this node named, and releases a pod's leases."""

    def __init__(self, node: str, bus: Bus, metrics: NodeAgentMetrics) -> None:
        self._node = node
        self._bus = bus
        self._metrics = metrics
        self._revisions: dict[PodUID, dict[str, int]] = {}
        """Pod -> the Allocate leases its decision said the scheduler holds (key -> revision)."""

    def decided(self, event: AllocationDecided) -> None:
        if event.leases and event.allocation.node == self._node:
            self._revisions[event.allocation.pod_uid] = self._valid(event.leases)

    def forget(self, pod_uid: PodUID) -> None:
        self._revisions.pop(pod_uid, None)

    def _valid(self, leases: dict[str, int]) -> dict[str, int]:
        """A decision's lease revisions, without any that cannot be one (bus input: counted, dropped;
        those leases are released the owner-checked way)."""
        valid = {key: rev for key, rev in leases.items() if rev > 0}
        if len(valid) < len(leases):
            self._metrics.bad_requests.labels(method="decision_leases").inc()
            log.warning("decision names lease revisions that cannot be: %s", leases)
        return valid

    async def release(self, allocation: Allocation) -> None:
        """Release every lease of the pod's device counts; an outage is retried until the lock TTL."""
        revisions = self._revisions.pop(allocation.pod_uid, {})
        deadline = asyncio.get_running_loop().time() + self._bus.settings.lock_ttl_s
        for size in device_counts(allocation.devices):
            key = lease_key(self._node, size)
            while True:
                try:
                    lease = await self._bus.lease(key, allocation.pod_uid, auto_renew=False)
                    await self._release(lease, revisions.get(key))
                    break
                except BusUnavailable as e:
                    if asyncio.get_running_loop().time() > deadline:
                        log.info("lease %s not released (%s); its TTL ends it", key, e)
                        break
                    await asyncio.sleep(_RETRY_S)

    async def _release(self, lease: Lease, revision: int | None) -> None:
        """One compare-and-delete at the decision's revision. When that loses, the hold is usually
        gone (the scheduler took the key over); if the pod still holds it, the revision was wrong
        (bus input: counted) and the hold is released the owner-checked way, not left to its TTL."""
        if await lease.release(revision) or revision is None:
            return
        if await lease.release():
            self._metrics.bad_requests.labels(method="decision_leases").inc()
            log.warning("lease %s of pod %s: the decision named revision %d, not the pod's; released anyway",
                        lease.key, lease.owner, revision)
