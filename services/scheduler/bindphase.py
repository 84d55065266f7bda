"""HAMi's ``hami.io/bind-phase`` pod annotation kept current for HAMi's tools (best effort).

HAMi's device plugin moves a pod's bind-phase from ``allocating`` to ``success`` or ``failed``;
tools and dashboards read it. gpubus learns the verdict from ``allocation.applied``/``failed``
events, so the reconciler queues a patch here and returns at once: a bounded queue drained by one
owned worker task. The same patch sets HAMi's ``hami.io/vgpu-node`` label (``label_nodes``): one
API write per pod for both instead of two (nothing in gpubus reads the label). A full queue drops
the patch (counted, logged) rather than ever blocking event handling; a failed patch is logged and
counted, never retried (the ledger, not the annotation, is the truth). Must not know NATS, HTTP or
the ledger.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from shared import annotations as ann
from shared.kube import KubeApi, KubeError

log = logging.getLogger(__name__)

#: Patches waiting at most; beyond this new ones are dropped (the API server is far behind).
QUEUE_SIZE = 1024
#: Kubernetes label values are at most 63 characters; a longer node name gets no label.
LABEL_VALUE_MAX = 63


@dataclass(frozen=True, slots=True, kw_only=True)
class PhasePatch:
    namespace: str
    name: str
    phase: ann.BindPhase
    node: str = ""
    """Value of the ``hami.io/vgpu-node`` label set by the same patch; "" sets none."""


class BindPhaseWriter:
    """``submit`` never blocks; ``run`` (an owned task) writes the patches one by one."""

    def __init__(
        self,
        kube: KubeApi | None,
        *,
        size: int = QUEUE_SIZE,
        label_nodes: bool = True,
        on_outcome: Callable[[str], None] | None = None,
    ) -> None:
        self._kube = kube
        self._label_nodes = label_nodes
        self._queue: asyncio.Queue[PhasePatch] = asyncio.Queue(maxsize=size)
        self._on_outcome = on_outcome

    def submit(self, namespace: str, name: str, phase: ann.BindPhase, node: str = "") -> bool:
        """Queue a patch (labelling the pod with ``node`` too, when labels are on and it fits);
        False (and counted as dropped) when there is no API or the queue is full."""
        if self._kube is None or not name:
            return False
        if not self._label_nodes or len(node) > LABEL_VALUE_MAX:
            node = ""
        try:
            self._queue.put_nowait(PhasePatch(namespace=namespace, name=name, phase=phase, node=node))
        except asyncio.QueueFull:
            self._count("dropped")
            log.warning("bind-phase queue full: %s/%s stays without %s", namespace, name, phase.value)
            return False
        return True

    async def run(self) -> None:
        while True:
            patch = await self._queue.get()
            try:
                await self._write(patch)
            finally:
                self._queue.task_done()

    async def drained(self) -> None:
        """Wait until every queued patch has been tried (tests and orderly shutdown)."""
        await self._queue.join()

    async def _write(self, patch: PhasePatch) -> None:
        assert self._kube is not None
        meta: dict[str, object] = {"annotations": {ann.BIND_PHASE: patch.phase.value}}
        if patch.node:
            meta["labels"] = {ann.ASSIGNED_NODE: patch.node}
        body = {"metadata": meta}
        try:
            await self._kube.patch_pod(patch.namespace, patch.name, body)
        except KubeError as e:
            self._count("failed")
            log.info(
                "pod %s/%s: could not set %s=%s: %s",
                patch.namespace,
                patch.name,
                ann.BIND_PHASE,
                patch.phase.value,
                e,
            )
            return
        self._count("written")

    def _count(self, outcome: str) -> None:
        if self._on_outcome is not None:
            self._on_outcome(outcome)
