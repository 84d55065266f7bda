"""Pending decisions of one node and the rule that matches a kubelet call to exactly one of them.

The kubelet's Allocate never names its pod; only the device count per container is known. A
call of size ``n`` matches the pending pod whose next unallocated GPU container (slot order:
init containers first) has ``n`` devices. The scheduler leader's handoff slots guarantee at most
one such pod; if that was broken anyway, the call is refused rather than guessed.
Pure state, no I/O, no clocks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from services.node_agent.allocate import is_container_name, is_pod_uid
from services.node_agent.errors import AmbiguousDecision, DecisionMismatch, NoDecision
from shared.allocation_rules import pod_problem
from shared.errors import clip
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUUID,
    PodUID,
)

NO_DECISION = "no allocation decided for this node"


#: How far ahead of this node's clock a decision's ``decided_at`` may lie: generous for any clock
#: skew a working cluster has (TLS and leases break first), and short, because a pod's finished
#: decision shadows its later ones until then: the scheduler's retry for it would wait that long.
MAX_DECIDED_AHEAD_S = 3600.0


def decision_problem(allocation: Allocation, cards: Mapping[DeviceUUID, DeviceInfo]) -> str | None:
    """Why a decision from the bus cannot be served on this node (None when it can).

    The codec checks types only; these are the promises the handoff relies on: one container
    name per slot, Kubernetes-shaped names (they become a cache directory path), and each
    pod's devices allocatable on this node's ``cards`` by the rules the scheduler's Fit follows
    too (:func:`shared.allocation_rules.pod_problem`).
    """
    if len(allocation.containers) != len(allocation.devices):
        return f"{len(allocation.containers)} container names for {len(allocation.devices)} device slots"
    names = [c for c, devices in zip(allocation.containers, allocation.devices, strict=True) if devices]
    if not all(is_container_name(c) for c in names) or len(set(names)) != len(names):
        return (
            f"container names {clip(str(names))} are empty, repeated or not path-safe"
            " (Kubernetes names containers with DNS-1123 labels)"
        )
    if not is_pod_uid(allocation.pod_uid):
        return f"pod UID {clip(allocation.pod_uid)!r} is not path-safe (not a Kubernetes UID)"
    return pod_problem(allocation.containers, allocation.devices, cards)


def time_problem(decided_at: float, now: float) -> str | None:
    """A ``decided_at`` that cannot be a scheduler's clock reading (it would shadow later decisions)."""
    if not math.isfinite(decided_at) or decided_at > now + MAX_DECIDED_AHEAD_S:
        return (
            f"decided at {decided_at!r}, more than {MAX_DECIDED_AHEAD_S:.0f} s ahead of this node's"
            f" clock ({now:.0f})"
        )
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Slot:
    """The next GPU container of a pending pod."""

    allocation: Allocation
    index: int
    """Position in ``allocation.devices`` / ``allocation.containers``."""

    @property
    def devices(self) -> tuple[ContainerDevice, ...]:
        return self.allocation.devices[self.index]

    @property
    def container(self) -> str:
        return self.allocation.containers[self.index]

    @property
    def size(self) -> int:
        return len(self.devices)

    @property
    def pod(self) -> str:
        return f"{self.allocation.namespace}/{self.allocation.name}"


@dataclass(slots=True)
class _Pending:
    allocation: Allocation
    answered: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Slot -> replica IDs the kubelet passed for it."""

    def next_index(self, planned: Collection[int] = ()) -> int | None:
        for i, devices in enumerate(self.allocation.devices):
            if devices and i not in self.answered and i not in planned:
                return i
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Completed:
    """A pod whose GPU containers were all allocated: what the kubelet passed per container."""

    allocation: Allocation
    answered: dict[int, tuple[str, ...]]


class PendingTable:
    """Decisions for one node that still wait for (some of) their Allocate calls."""

    def __init__(self, node: str, memory: int = 4096) -> None:
        self._node = node
        self._pods: dict[PodUID, _Pending] = {}
        self._finished: OrderedDict[PodUID, float] = OrderedDict()
        """Pod -> the newest ``decided_at`` that is finished here; only a later decision counts."""
        self._memory = memory

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, pod_uid: object) -> bool:
        return pod_uid in self._pods

    def concerns(self, allocation: Allocation) -> bool:
        """A decision for this node with GPUs, for a pod not already finished here."""
        finished = self._finished.get(allocation.pod_uid)
        return (
            allocation.node == self._node
            and allocation.state == AllocationState.DECIDED
            and (finished is None or allocation.decided_at > finished)
            and any(allocation.devices)
        )

    def add(self, allocation: Allocation) -> bool:
        """Keep a decided allocation for this node; a re-delivered identical one keeps its progress."""
        if not self.concerns(allocation):
            return False
        current = self._pods.get(allocation.pod_uid)
        if current is not None and current.allocation.devices == allocation.devices:
            current.allocation = allocation
            return False
        self._pods[allocation.pod_uid] = _Pending(allocation)
        return True

    def release(self, pod_uid: PodUID, upto: float = 0.0) -> Allocation | None:
        """Forget a pod's decision (released, deleted, failed); copies of it that come later are ignored.

        Ignored are decisions made at or before the pending one's ``decided_at`` or ``upto`` (the
        release's time on the scheduler's clock): a bind that failed and was retried for the same
        pod brings a newer decision, and that one counts.
        """
        pending = self._pods.pop(pod_uid, None)
        decided_at = pending.allocation.decided_at if pending else 0.0
        if not math.isfinite(upto):
            upto = 0.0  # a garbled release time (from the bus) must not block every later decision
        self._remember(pod_uid, max(upto, decided_at, self._finished.get(pod_uid, 0.0)))
        return pending.allocation if pending else None

    def _remember(self, pod_uid: PodUID, upto: float) -> None:
        self._finished[pod_uid] = upto
        self._finished.move_to_end(pod_uid)
        while len(self._finished) > self._memory:
            self._finished.popitem(last=False)

    def next_slots(self, planned: Collection[Slot] = ()) -> list[Slot]:
        """Each pending pod's next GPU container, past the slots ``planned`` for the same call."""
        slots = []
        for pending in self._pods.values():
            uid = pending.allocation.pod_uid
            taken = {s.index for s in planned if s.allocation.pod_uid == uid} if planned else ()
            index = pending.next_index(taken)
            if index is not None:
                slots.append(Slot(allocation=pending.allocation, index=index))
        return slots

    def plan(self, sizes: Sequence[int]) -> list[Slot]:
        """The slots of one kubelet call with a container of each size, in order; nothing is marked.

        All or none: a call whose last container matches nothing leaves every pod as it was.
        """
        planned: list[Slot] = []
        for size in sizes:
            planned.append(self.choose(size, planned))
        return planned

    def choose(self, size: int, planned: Collection[Slot] = ()) -> Slot:
        """The one slot a call of ``size`` devices is for; :class:`NoDecision`/:class:`DecisionMismatch`.

        Two candidates are refused, never told apart by the devices the kubelet passed: the kubelet
        may have picked those without our preference, so they say nothing about the pod.
        """
        slots = self.next_slots(planned)
        candidates = [s for s in slots if s.size == size]
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            pods = ", ".join(sorted(s.pod for s in candidates))
            raise AmbiguousDecision(
                f"ambiguous Allocate of {size} devices: pods {pods} all wait for it; not guessing"
            )
        if not slots:
            raise NoDecision(NO_DECISION)
        if len(slots) == 1:
            raise DecisionMismatch(
                f"device count {size} does not match the decision {slots[0].size} for pod {slots[0].pod},"
                " the only one pending on this node (the pod being admitted may have none here yet)"
            )
        wants = ", ".join(sorted(f"{s.pod} wants {s.size}" for s in slots))
        raise DecisionMismatch(f"device count {size} matches no decision pending on this node ({wants}):"
                               " the pod being admitted may have none here yet")

    def mark(self, slot: Slot, device_ids: Sequence[str]) -> Completed | None:
        """Record that ``slot`` was answered; returns the pod when it was its last GPU container."""
        pending = self._pods.get(slot.allocation.pod_uid)
        if pending is None:
            return None
        pending.answered[slot.index] = tuple(device_ids)
        if pending.next_index() is not None:
            return None
        del self._pods[slot.allocation.pod_uid]
        self._remember(slot.allocation.pod_uid, pending.allocation.decided_at)
        return Completed(allocation=pending.allocation, answered=dict(pending.answered))

    def mark_containers(self, pod_uid: PodUID, containers: Iterable[str]) -> Completed | None:
        """Reconcile with the kubelet: these containers already hold devices (e.g. after our restart)."""
        pending = self._pods.get(pod_uid)
        if pending is None:
            return None
        names = set(containers)
        completed = None
        for index, name in enumerate(pending.allocation.containers):
            if name in names and pending.allocation.devices[index] and index not in pending.answered:
                completed = self.mark(Slot(allocation=pending.allocation, index=index), ())
        return completed

    def pods(self) -> list[Allocation]:
        return [p.allocation for p in self._pods.values()]
