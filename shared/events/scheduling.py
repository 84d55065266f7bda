"""Scheduling events: placement decisions and the life of each allocation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from shared.events.base import Event
from shared.model import Allocation


@dataclass(frozen=True, slots=True, kw_only=True)
class PodUnschedulable(Event):
    """Filter found no node; ``reasons`` maps node -> HAMi reason string ("1/8 CardInsufficientMemory")."""

    KIND: ClassVar[str] = "pod.unschedulable"

    namespace: str
    name: str
    uid: str
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodPreempted(Event):
    """The scheduler evicted ``victim`` (Eviction API) to make room for the pending ``beneficiary``
    on ``node`` (the event's node) and ``card`` (empty when the victims only share the node)."""

    KIND: ClassVar[str] = "pod.preempted"

    namespace: str
    """The victim's namespace."""
    name: str
    """The victim's name."""
    uid: str
    """The victim's UID."""
    priority: int = 0
    """The victim's priority."""
    beneficiary_namespace: str
    beneficiary_name: str
    beneficiary_uid: str
    beneficiary_priority: int = 0
    card: str = ""
    reason: str = ""
    """Why the beneficiary needed room (its Fit reasons before the eviction)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationDecided(Event):
    """The scheduler bound a pod and fixed its devices; the node-agent serves Allocate from this."""

    KIND: ClassVar[str] = "allocation.decided"

    allocation: Allocation
    leases: dict[str, int] = field(default_factory=dict)
    """Unused since the Allocate leases went (issue 32): never written, ignored when read. Kept in
    the schema so that decisions of older schedulers still decode (docs/events.md)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationReleased(Event):
    """A pod's slices went back to the pool (deleted, finished, failed, bind error, expired)."""

    KIND: ClassVar[str] = "allocation.released"

    pod_uid: str
    namespace: str
    name: str
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationApplied(Event):
    """The node-agent answered the kubelet's Allocate for one container of a pod."""

    KIND: ClassVar[str] = "allocation.applied"

    pod_uid: str
    namespace: str
    name: str
    container: str
    device_ids: tuple[str, ...]
    """Replica IDs the kubelet passed (``<UUID>-<i>``)."""
    complete: bool = False
    """True when every GPU container of the pod has been allocated."""
    mig_uuids: tuple[str, ...] = ()
    """On MIG cards: the UUID of the MIG instance each of the container's cards got, in card order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationFailed(Event):
    """The node-agent refused an Allocate; the scheduler frees the slice."""

    KIND: ClassVar[str] = "allocation.failed"

    pod_uid: str = ""
    namespace: str = ""
    name: str = ""
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationMismatch(Event):
    """The kubelet's pod resources API disagrees with what we allocated (contract item 2)."""

    KIND: ClassVar[str] = "allocation.mismatch"

    pod_uid: str = ""
    namespace: str
    name: str
    container: str
    expected: tuple[str, ...]
    actual: tuple[str, ...]
