"""The node's inventory on the bus and in Kubernetes, level-triggered (style rule 11).

:meth:`InventoryPublisher.run` (an owned task of the agent) publishes the full inventory, the
``inventory.snapshot`` event and the node's KV entry (:mod:`shared.inventory_entries`), on start, on
every change of the advertised state and every ``heartbeat_s``; writes HAMi's node register
annotation when its JSON changes, and (``publish_capacity``) GPU memory and cores in the Node's
capacity and allocatable when they change. A KV write or patch that fails is logged and retried on
the next heartbeat.

Must not know the kubelet or decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from services.node_agent.advertised import Advertised, Snapshot
from services.node_agent.inventory import node_resources
from services.node_agent.settings import NodeAgentSettings
from shared.annotations import NODE_REGISTER, encode_node_devices
from shared.bus import INVENTORY, Bus
from shared.errors import BusUnavailable, GpubusError
from shared.events import Inventory
from shared.inventory_entries import encode_inventory
from shared.kube import KubeApi

log = logging.getLogger(__name__)


class InventoryPublisher:
    """Publishes one node's advertised devices; ``kube`` None: no node annotation."""

    def __init__(
        self, node: str, advertised: Advertised, bus: Bus, kube: KubeApi | None, settings: NodeAgentSettings
    ) -> None:
        self._node = node
        self._advertised = advertised
        self._bus = bus
        self._kube = kube
        self._settings = settings
        self._heartbeat_s = settings.heartbeat_s
        self._annotation = ""
        self._resources: dict[str, dict[str, str]] = {}

    async def run(self) -> None:
        """Publish on start, on every change and every ``heartbeat_s``, forever."""
        while True:
            snapshot = self._advertised.snapshot
            await self.publish(snapshot)
            await self._annotate_node(snapshot)
            await self._publish_resources(snapshot)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow the cancel of a stop
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._heartbeat_s):
                    await self._advertised.changed(snapshot.generation)

    async def publish(self, snapshot: Snapshot) -> None:
        event = Inventory(
            node=self._node,
            source=self._bus.source,
            devices=snapshot.devices,
            heartbeat_s=self._heartbeat_s,
            generation=snapshot.generation,
        )
        self._bus.emit(event)
        try:
            await (await self._bus.kv(INVENTORY)).put(self._node, encode_inventory(event))
        except BusUnavailable as e:
            log.info("inventory KV not written (%s); next heartbeat retries", e)

    async def _annotate_node(self, snapshot: Snapshot) -> None:
        """HAMi's register annotation, patched only when its JSON changes."""
        if self._kube is None:
            return
        value = encode_node_devices(snapshot.devices)
        if value == self._annotation:
            return
        try:
            await self._kube.patch_node(self._node, {"metadata": {"annotations": {NODE_REGISTER: value}}})
        except GpubusError as e:
            log.warning("cannot write %s on node %s: %s", NODE_REGISTER, self._node, e)
            return
        self._annotation = value

    async def _publish_resources(self, snapshot: Snapshot) -> None:
        """Memory and cores in the Node's capacity/allocatable, patched only when they change."""
        if self._kube is None or not self._settings.publish_capacity:
            return
        status = node_resources(snapshot.devices, self._settings)
        if status == self._resources:
            return
        try:
            await self._kube.patch_node_status(self._node, {"status": status})
        except GpubusError as e:
            log.warning("cannot publish GPU memory and cores on node %s: %s", self._node, e)
            return
        self._resources = status
