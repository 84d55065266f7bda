"""Making kube-scheduler retry the pods gpubus refused once gpubus can place them again.

kube-scheduler parks a pod that no node fits until a cluster event it watches could make it fit
(or for up to 5 minutes). What made gpubus refuse it may be invisible to kube-scheduler: a node's
inventory gone stale while NATS lost quorum, no scheduler leader, a card unhealthy. When that
ends (a node's inventory comes back, this replica becomes leader) every pod this replica refused
gets an annotation patch, ``gpubus.io/requeue-at``: an update of an unschedulable pod is an event
kube-scheduler requeues it on (UnscheduledPodUpdate; a pod rejected by an extender has no plugin
whose hints could skip it). Each refusal is nudged once; a pod refused again is nudged again only
after the next such change, so a pod that truly fits nowhere is not retried in a loop.

Must not know HTTP or Fit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from shared.kube import KubeApi, KubeError
from shared.kube_errors import NotFound

log = logging.getLogger(__name__)

#: The annotation whose change makes kube-scheduler retry the pod now.
REQUEUE_ANNOTATION = "gpubus.io/requeue-at"
#: Refused pods remembered (oldest dropped first: kube-scheduler's own 5-minute flush retries them).
REFUSED_KEPT = 10_000
#: Pod patches in flight at once.
CONCURRENCY = 8


class Requeuer:
    """Remembers refused pods; :meth:`nudge` has kube-scheduler retry them (one pass at a time)."""

    def __init__(self, kube: KubeApi | None, *, on_patch: Callable[[str], None] = lambda outcome: None,
                 clock: Callable[[], float] = time.time, size: int = REFUSED_KEPT) -> None:
        self._kube = kube
        self._on_patch = on_patch
        """Counts each patch by outcome (patched, gone, failed)."""
        self._clock = clock
        self._size = size
        self._refused: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._wanted = asyncio.Event()
        self.passes = 0
        """Completed nudge passes (tests wait on it)."""

    def refused(self, namespace: str, name: str, uid: str) -> None:
        """Filter found no node for this pod (a pod the API server has)."""
        self._refused[uid] = (namespace, name)
        self._refused.move_to_end(uid)
        while len(self._refused) > self._size:
            self._refused.popitem(last=False)

    def placed(self, uid: str) -> None:
        """The pod is bound or gone: nothing to retry."""
        self._refused.pop(uid, None)

    @property
    def wanted(self) -> bool:
        """A pass is due (nudged, not started yet)."""
        return self._wanted.is_set()

    def nudge(self, why: str) -> None:
        """Something that made pods unplaceable is over: retry the refused ones (coalesced)."""
        if self._kube is None or not self._refused:
            return
        log.info("requeueing %d refused pod(s): %s", len(self._refused), why)
        self._wanted.set()

    async def run(self) -> None:
        """Forever: one pass per batch of nudges (an owned task of the app)."""
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            await self._pass()

    async def _pass(self) -> None:
        pods, self._refused = self._refused, OrderedDict()
        stamp = f"{self._clock():.3f}"
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(namespace: str, name: str) -> None:
            async with limit:
                self._on_patch(await self._patch(namespace, name, stamp))

        await asyncio.gather(*(one(ns, name) for ns, name in pods.values()))
        self.passes += 1

    async def _patch(self, namespace: str, name: str, stamp: str) -> str:
        assert self._kube is not None
        try:
            await self._kube.patch_pod(namespace, name,
                                       {"metadata": {"annotations": {REQUEUE_ANNOTATION: stamp}}})
        except NotFound:
            return "gone"
        except KubeError as e:
            log.info("could not requeue pod %s/%s: %s", namespace, name, e)
            return "failed"
        return "patched"
