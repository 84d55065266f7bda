"""The Allocate handoff on the node: pending decisions in, kubelet answers and outcome events out.

Owns the node's :class:`PendingTable`, the bounded wait for a decision that has not arrived yet,
the host side effects of an answer (the per-container cache directory) and the
``allocation.applied``/``allocation.failed`` events (emitted through the bus outbox, so a kubelet
never waits on NATS). Finished pods go to ``on_done(allocation, completed)``: completed, or None when refused
(the app verifies completed ones).
It knows neither gRPC nor the NATS client: the servicer and the app sit on either side.

Cache directories (``<hook>/vgpu/containers/<podUID>_<ctr>``) are created here and never deleted
here: HAMi-core's shared region lives in them while the container runs, and the monitor, which
sees which pods still exist, removes them. Decisions from the bus are checked once on arrival
(:func:`decision_problem`, :func:`time_problem`); a broken one is
counted, failed and released, never served. One kubelet call is answered all or none.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from services.node_agent.allocate import (
    AllocateConfig,
    ContainerResponse,
    build_container_response,
    build_mig_response,
    cache_dir,
    preferred_replicas,
)
from services.node_agent.errors import (
    AllocateFailed,
    AmbiguousDecision,
    BadAllocateRequest,
    DecisionMismatch,
    NoDecision,
)
from services.node_agent.metrics import NodeAgentMetrics
from services.node_agent.mig import MigError, MigInstances, MigPort
from services.node_agent.pending import (
    Completed,
    PendingTable,
    Slot,
    decision_problem,
    time_problem,
)
from services.node_agent.settings import NodeAgentSettings
from shared.errors import clip
from shared.events import AllocationApplied, AllocationFailed, Event
from shared.model import Allocation, DeviceInfo, DeviceUUID, PodUID

log = logging.getLogger(__name__)

#: A kubelet call that has waited this long for its decision asks for a resync of the decisions'
#: consumer (seconds): the decision is published before the pod is bound, so it is normally here
#: before the kubelet calls, and one that is not may sit on a consumer its server lost, which the
#: consumer's slow heartbeats would notice only later.
RESYNC_AFTER_S = 0.5
#: ... and again this often while it still waits (seconds): a re-creation can fail while the
#: cluster elects a new leader, and nothing else would retry it before the heartbeats do.
RESYNC_EVERY_S = 1.0

#: Refusal -> ``outcome`` label of the allocations counter.
_OUTCOMES: dict[type[Exception], str] = {
    NoDecision: "no_decision",
    AmbiguousDecision: "ambiguous",
    DecisionMismatch: "mismatch",
    AllocateFailed: "failed",
    BadAllocateRequest: "bad_request",
}


def allocate_config(settings: NodeAgentSettings) -> AllocateConfig:
    """Response inputs from settings plus what exists under the hook path (read once, at start)."""
    vgpu = Path(settings.hook_path) / "vgpu"
    versioned = f"libvgpu.so.{settings.libvgpu_version}"
    return AllocateConfig(
        hook_path=settings.hook_path,
        memory_scaling=settings.device_memory_scaling,
        disable_core_limit=settings.disable_core_limit,
        core_policy=settings.gpu_core_policy,
        lib_cuda_log_level=settings.lib_cuda_log_level,
        libvgpu_file=versioned if settings.libvgpu_version and (vgpu / versioned).is_file() else "libvgpu.so",
        license_present=(vgpu / "license").exists(),
        gdrcopy=settings.gdrcopy_enabled,
        gds=settings.gds_enabled,
        mofed=settings.mofed_enabled,
    )


class Handoff:
    """Matches kubelet calls to decided pods and answers them from the local cache."""

    def __init__(
        self,
        *,
        settings: NodeAgentSettings,
        uuid_of: Mapping[str, DeviceUUID],
        cards: Mapping[DeviceUUID, DeviceInfo],
        emit: Callable[[Event], None],
        metrics: NodeAgentMetrics,
        on_done: Callable[[Allocation, Completed | None], None],
        mig: MigPort | None = None,
        on_stalled: Callable[[], None] | None = None,
    ) -> None:
        self._node = settings.node_name
        self._on_stalled = on_stalled
        """Called when a kubelet call has waited :data:`RESYNC_AFTER_S` for its decision, and every
        :data:`RESYNC_EVERY_S` while it still waits."""
        self._wait_s = settings.allocate_wait_s
        self._config = allocate_config(settings)
        self._uuid_of = uuid_of
        self._cards = cards
        """The registered memory and cores of each GPU: no decision may give a container more."""
        self._emit = emit
        self._metrics = metrics
        self._on_done = on_done
        self.mig = MigInstances(mig)
        """MIG instances made for pods; destroyed by :meth:`reclaim` when a pod's slice is released."""
        self.table = PendingTable(settings.node_name)
        self.waiting = 0
        """Kubelet calls currently waiting for a decision to arrive."""
        self._changed = asyncio.Event()

    # -- decisions (from the bus) ----------------------------------------------------------
    def decided(self, allocation: Allocation) -> None:
        if self._acceptable(allocation, "allocation_event") and self.table.add(allocation):
            self._prepare_cache_dirs(allocation)
            log.info(
                "pending decision for pod %s/%s (%s)",
                allocation.namespace,
                allocation.name,
                allocation.pod_uid,
            )
            self._wake()

    def released(self, pod_uid: PodUID, at: float = 0.0) -> None:
        """The scheduler released the pod's decision at ``at`` (its clock); a later one still counts."""
        problem = time_problem(at, time.time())
        if problem is not None:
            # bus input: such a time would shadow every later decision for the pod
            self._metrics.bad_requests.labels(method="allocation_event").inc()
            log.warning("release of pod %s: %s; taken as a release of whatever is pending", pod_uid, problem)
            at = 0.0
        if self.table.release(pod_uid, at) is not None:
            log.info("decision for pod %s released", pod_uid)
            self._wake()

    async def reclaim(self, pod_uid: PodUID) -> None:
        """The pod's allocation is released (finished, deleted or failed): destroy its MIG instances."""
        if await self.mig.release(pod_uid):
            log.info("MIG instances of pod %s destroyed", pod_uid)

    async def recover_mig(
        self, cards: Sequence[DeviceUUID], allocations: Sequence[Allocation], *, destroy: bool
    ) -> None:
        """After a restart: keep the MIG instances the ledger reserves, destroy the others (only when
        the whole ledger could be read: an unread entry may hold a running pod's instance)."""
        try:
            adopted, destroyed = await self.mig.recover(cards, allocations, destroy=destroy)
        except MigError as e:
            log.warning("MIG instances not recovered: %s", e)
            return
        if adopted or destroyed:
            log.info("MIG instances after the restart: %d adopted, %d destroyed", adopted, destroyed)

    def rebuild(self, allocations: Iterable[Allocation]) -> int:
        added = [a for a in allocations if self._acceptable(a, "allocations_kv") and self.table.add(a)]
        for allocation in added:
            self._prepare_cache_dirs(allocation)
        self._wake()
        return len(added)

    def _acceptable(self, allocation: Allocation, where: str) -> bool:
        """False for a decision that is not ours; a broken one is also counted, failed and released."""
        if not self.table.concerns(allocation):
            return False
        now = time.time()
        untimely = time_problem(allocation.decided_at, now)
        problem = (
            decision_problem(allocation, self._cards) or untimely
        )
        if problem is None:
            return True
        self._metrics.bad_requests.labels(method=where).inc()
        log.warning("decision for pod %s/%s refused: %s", allocation.namespace, allocation.name, problem)
        # An absurd decided_at must not become the pod's "finished up to" mark either.
        self.table.release(allocation.pod_uid, 0.0 if untimely else allocation.decided_at)
        self._wake()
        self._emit_failed(f"decision refused by the node-agent: {problem}", allocation)
        self._on_done(allocation, None)
        return False

    def _prepare_cache_dirs(self, allocation: Allocation) -> None:
        """Create the containers' cache directories now, off the Allocate path (it re-checks)."""
        for name, devices in zip(allocation.containers, allocation.devices, strict=False):
            if not devices:
                continue
            try:
                self._make_cache_dir(cache_dir(self._config.hook_path, allocation.pod_uid, name))
            except (AllocateFailed, BadAllocateRequest) as e:
                log.warning("pod %s/%s: %s (Allocate retries)", allocation.namespace, allocation.name, e)

    def reconcile(self, assigned: Mapping[tuple[str, str], Mapping[str, tuple[str, ...]]]) -> None:
        """Containers the kubelet already holds devices for are no longer pending (agent restarted)."""
        for allocation in self.table.pods():
            containers = assigned.get((allocation.namespace, allocation.name), {})
            done = [name for name, ids in containers.items() if ids]
            completed = self.table.mark_containers(allocation.pod_uid, done)
            if completed is not None:
                self._on_done(allocation, completed)
        self._wake()

    def _wake(self) -> None:
        self._metrics.pending.set(len(self.table))
        self._changed.set()
        self._changed = asyncio.Event()

    # -- kubelet calls ---------------------------------------------------------------------
    async def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> tuple[str, ...]:
        """Replicas of the decided GPUs for the next container of ``size``; () lets the kubelet choose."""
        try:
            (slot,) = await self._wait_for_plan([size])
        except (NoDecision, DecisionMismatch) as e:
            self._metrics.preferred.labels(outcome="no_match").inc()
            log.info("GetPreferredAllocation(%d): %s; leaving the choice to the kubelet", size, e)
            return ()
        self._metrics.preferred.labels(outcome="decided").inc()
        decided = [d.uuid for d in slot.devices]
        return preferred_replicas(decided, available, must_include, size, self._uuid_of)

    def physical(self, requests: Sequence[Sequence[str]]) -> list[list[DeviceUUID]]:
        """Validate the kubelet's replica IDs; :class:`BadAllocateRequest` names the first bad one."""
        seen: set[str] = set()
        for device_ids in requests:
            if not device_ids:
                raise BadAllocateRequest("container request without device ids")
            if len(set(device_ids)) != len(device_ids) or seen.intersection(device_ids):
                raise BadAllocateRequest(f"duplicate device ids in {clip(str(list(device_ids)))}")
            seen.update(device_ids)
            unknown = [i for i in device_ids if i not in self._uuid_of]
            if unknown:
                raise BadAllocateRequest(
                    f"unknown device id {clip(unknown[0])!r}: not advertised by node {self._node}"
                )
        return [[self._uuid_of[i] for i in device_ids] for device_ids in requests]

    async def allocate(self, requests: Sequence[Sequence[str]]) -> list[ContainerResponse]:
        """Answer one Allocate call (device IDs per container), or raise a node-agent error (already
        counted and emitted). Every container is matched and answered before any is recorded, so a
        refused call leaves every pending pod as it was for the kubelet's retry."""
        slot: Slot | None = None
        device_ids: Sequence[str] = [i for ids in requests for i in ids]
        answers: list[tuple[Slot, Sequence[str], ContainerResponse, tuple[str, ...]]] = []
        try:
            physical = self.physical(requests)
            slots = await self._wait_for_plan([len(ids) for ids in requests])
            for slot, device_ids, devices in zip(slots, requests, physical, strict=True):
                mig = await self._mig_instances(slot)
                answers.append((slot, device_ids, self._answer(slot, devices, mig), mig))
        except (NoDecision, DecisionMismatch, AllocateFailed, BadAllocateRequest) as e:
            pods = {a[0].allocation.pod_uid for a in answers} | ({slot.allocation.pod_uid} if slot else set())
            for pod in pods:
                await self.mig.release(pod)  # all or none: the pod fails, its instances go
            self._failed(e, slot, device_ids)
            raise
        return [self._applied(slot, ids, response, mig) for slot, ids, response, mig in answers]

    async def _mig_instances(self, slot: Slot) -> tuple[str, ...]:
        """The MIG UUIDs of the slot's cards, created now at the reserved placements; () without MIG."""
        if all(d.mig is None for d in slot.devices):
            return ()
        return await self.mig.ensure(slot.allocation.pod_uid, slot.container, slot.devices)

    def _applied(
        self, slot: Slot, device_ids: Sequence[str], response: ContainerResponse, mig: tuple[str, ...] = ()
    ) -> ContainerResponse:
        """Record one answered container: counted, ``allocation.applied``, the pod done when complete."""
        completed = self.table.mark(slot, device_ids)
        self._metrics.allocations.labels(outcome="applied").inc()
        self._emit(
            AllocationApplied(
                node=self._node,
                pod_uid=slot.allocation.pod_uid,
                namespace=slot.allocation.namespace,
                name=slot.allocation.name,
                container=slot.container,
                device_ids=tuple(device_ids),
                complete=completed is not None,
                mig_uuids=mig,
            )
        )
        if completed is not None:
            self._wake()
            self._on_done(slot.allocation, completed)
        return response

    async def _wait_for_plan(self, sizes: Sequence[int]) -> list[Slot]:
        """The slots of a call (see :meth:`PendingTable.plan`), waiting a bounded time for decisions."""
        deadline = time.monotonic() + self._wait_s
        resync_at = time.monotonic() + RESYNC_AFTER_S
        while True:
            changed = self._changed
            try:
                return self.table.plan(sizes)
            except AmbiguousDecision:
                raise
            except (NoDecision, DecisionMismatch) as e:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if self._wait_s <= 0:
                        raise
                    # the decision travels on NATS, the pod on the API server: say how long it lagged
                    e.args = (f"{e} (waited {self._wait_s:g} s for it)",)
                    raise
            if time.monotonic() >= resync_at:
                resync_at = time.monotonic() + RESYNC_EVERY_S
                if self._on_stalled is not None:
                    self._on_stalled()
            until = min(remaining, resync_at - time.monotonic())
            self.waiting += 1
            try:
                await asyncio.wait_for(changed.wait(), max(until, 0.0))
            except TimeoutError:
                continue  # one last plan() raises the precise reason
            finally:
                self.waiting -= 1

    def _answer(
        self, slot: Slot, physical: Sequence[DeviceUUID], mig: Sequence[str] = ()
    ) -> ContainerResponse:
        decided = sorted(d.uuid for d in slot.devices)
        if sorted(physical) != decided:
            # The kubelet ignored our preference; the decided GPUs win (their limits were accounted).
            self._metrics.mismatches.labels(where="allocate").inc()
            log.warning(
                "pod %s container %s: kubelet passed GPUs %s but %s were decided; using the decision",
                slot.pod,
                slot.container,
                sorted(physical),
                decided,
            )
        if mig:
            return build_mig_response(slot.devices, mig)
        response = build_container_response(
            slot.devices,
            self._config,
            pod_uid=slot.allocation.pod_uid,
            container=slot.container,
            cache_id=str(uuid.uuid4()),
        )
        path = cache_dir(self._config.hook_path, slot.allocation.pod_uid, slot.container)
        if not os.path.isdir(path):
            self._make_cache_dir(path)
        return response

    @staticmethod
    def _make_cache_dir(path: str) -> None:
        try:
            try:
                os.mkdir(path)  # one syscall on the hot path; the parent exists after the first pod
            except FileNotFoundError:
                os.makedirs(path, exist_ok=True)
            except FileExistsError:
                if os.path.isdir(path):
                    return  # made (and opened up) when the decision arrived
                raise
            os.chmod(path, 0o777)  # HAMi-core in containers of any uid writes here
        except OSError as e:
            raise AllocateFailed(f"cannot create the HAMi-core cache directory {path}: {e.strerror}") from e

    def _failed(self, error: Exception, slot: Slot | None, device_ids: Sequence[str]) -> None:
        outcome = _OUTCOMES.get(type(error), "failed")
        self._metrics.allocations.labels(outcome=outcome).inc()
        log.warning("Allocate %s refused: %s", clip(str(list(device_ids))), error)
        pod = slot.allocation if slot is not None else None
        self._emit_failed(str(error), pod)
        if pod is not None:
            self.table.release(pod.pod_uid)
            self._wake()
            self._on_done(pod, None)

    def _emit_failed(self, reason: str, pod: Allocation | None) -> None:
        self._emit(
            AllocationFailed(
                node=self._node,
                reason=reason,
                pod_uid=pod.pod_uid if pod else "",
                namespace=pod.namespace if pod else "",
                name=pod.name if pod else "",
            )
        )
