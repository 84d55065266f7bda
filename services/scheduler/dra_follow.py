"""DRA mode's events from the leader: claims kube-scheduler allocated -> ``allocation.decided``.

In DRA mode gpubus decides nothing (kube-scheduler allocates claims on the node-agents'
ResourceSlices), but the event stream should read as in extender mode: the leader follows every
ResourceClaim (list + watch, re-list on 410) and, when a pod's gpubus claims are allocated and
reserved for it, publishes the pod's :class:`Allocation` (:mod:`.dra_claims`) as
``allocation.decided``; again when it changes, and ``allocation.released`` when its last claim is
deallocated or deleted (the node-agent also says so when the kubelet unprepares it; consumers
take a release twice as once). Prepared -> ``allocation.applied`` is the node-agent's.

Nothing is written to the ``allocations`` bucket: the extender's ledger never places pods on DRA
nodes, and kube-scheduler's allocations live in the claims themselves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, Protocol

from services.scheduler import dra_claims
from services.scheduler.ledger import Ledger
from shared import dra
from shared.bus.errors import EventRefused
from shared.errors import BusUnavailable
from shared.events import AllocationDecided, AllocationReleased, Event
from shared.kube_errors import KubeError, KubeRejected
from shared.kube_types import Pod, WatchEvent
from shared.kube_watch import Backoff, list_and_watch
from shared.model import Allocation, DeviceInfo, NodeName

log = logging.getLogger(__name__)

Json = dict[str, Any]


class ClaimApi(Protocol):
    """What the follower asks of :class:`shared.kube.KubeClient`."""

    async def list_resource_claims(self) -> tuple[list[Json], str]: ...

    def watch_resource_claims(self, resource_version: str) -> AsyncIterator[WatchEvent]: ...

    async def get_pod(self, namespace: str, name: str) -> Pod | None: ...


class Publisher(Protocol):
    async def publish(self, event: Event) -> None: ...


def slim(claim: Json) -> Json:
    """What is kept of a claim: its name and version, allocation and reservations."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    return {"metadata": {k: meta.get(k) for k in ("namespace", "name", "uid", "resourceVersion")},
            "status": {"allocation": status.get("allocation"), "reservedFor": status.get("reservedFor")}}


class ClaimFollower:
    """The leader's owned task (:meth:`run`); its state is rebuilt from the first list."""

    def __init__(self, kube: ClaimApi, bus: Publisher, ledger: Ledger, *, driver: str = dra.DRIVER,
                 clock: Callable[[], float] = time.time, retry_s: float = 1.0) -> None:
        self.kube, self.bus, self.ledger, self.driver, self.clock = kube, bus, ledger, driver, clock
        self.retry_s = retry_s
        self._claims: dict[str, Json] = {}
        """namespace/name -> an allocated, reserved claim with devices of ours."""
        self._published: dict[str, Allocation] = {}
        """pod uid -> the allocation last published for it."""

    async def run(self) -> None:
        """Follow claims forever. A refused list (RBAC not there yet, or missing) is logged and
        tried again with backoff rather than ending the scheduler: the extender does not need it."""
        backoff = Backoff(initial_s=self.retry_s, max_s=max(self.retry_s, 10.0))
        while True:
            try:
                async for event in list_and_watch(self.kube.list_resource_claims,
                                                  self.kube.watch_resource_claims,
                                                  what="resourceclaims", transform=slim):
                    backoff.reset()
                    await self.on_claim(event["type"], event["object"])
            except KubeRejected as e:
                log.error("cannot follow ResourceClaims, so DRA pods get no allocation.decided: %s", e)
                await backoff.wait()

    async def on_claim(self, kind: str, claim: Json) -> None:
        meta = claim.get("metadata") or {}
        namespace, key = str(meta.get("namespace", "")), f"{meta.get('namespace')}/{meta.get('name')}"
        before = dra_claims.reserved_pods(self._claims.get(key) or {})
        ours = kind != "DELETED" and dra.results(claim, self.driver) and dra_claims.reserved_pods(claim)
        if ours:
            self._claims[key] = claim
        else:
            self._claims.pop(key, None)
        for name, uid in dict.fromkeys((*before, *dra_claims.reserved_pods(claim))):
            await self._pod_changed(namespace, name, uid)

    async def _pod_changed(self, namespace: str, name: str, uid: str) -> None:
        claims = [c for c in self._claims.values() if c["metadata"].get("namespace") == namespace
                  and (name, uid) in dra_claims.reserved_pods(c)]
        if not claims:
            last = self._published.pop(uid, None)
            if last is not None:
                await self._publish(AllocationReleased(pod_uid=uid, namespace=namespace, name=name,
                                                       node=last.node, why="its DRA claims were deallocated"))
            return
        try:
            pod = await self.kube.get_pod(namespace, name)
        except KubeError as e:
            log.warning("cannot read pod %s/%s for its claims now: %s", namespace, name, e)
            return
        if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
            return
        allocation = dra_claims.pod_allocation(pod, claims, card_of=self._card, driver=self.driver,
                                               decided_at=self.clock())
        if allocation is None:
            return
        last = self._published.get(uid)
        if last is not None and replace(last, decided_at=0.0) == replace(allocation, decided_at=0.0):
            return
        self._published[uid] = allocation
        await self._publish(AllocationDecided(allocation=allocation, node=allocation.node))
        log.info("claims of %s/%s allocated on %s", namespace, name, allocation.node)

    def _card(self, node: NodeName, index: int) -> DeviceInfo | None:
        inventory = self.ledger.inventory(node)
        if inventory is None:
            return None
        return next((d for d in inventory.devices if d.index == index), None)

    async def _publish(self, event: Event) -> None:
        try:
            await self.bus.publish(event)
        except (BusUnavailable, EventRefused) as e:
            log.warning("could not publish %s for %s/%s: %s", event.KIND, getattr(event, "namespace", ""),
                        getattr(event, "name", ""), e)
