"""Device health on one node: a source's changes applied to the advertised state, and the health query.

:class:`Health` follows the device source's health stream (:meth:`Health.follow`, an owned task of
the agent), applies each change to :class:`Advertised` (which wakes ListAndWatch and the inventory
publisher), counts it and publishes ``device.health``. The health query
(``gpubus.query.health.<node>``, served only for sources that take injected changes: the simulated
one) parses its request here (:func:`parse_health_request`, pure) and injects the change into the
source, which reports it back through the same stream.

Must not know the kubelet or decisions.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from services.node_agent.advertised import Advertised, Snapshot
from services.node_agent.discovery import DeviceSource, HealthChange, HealthInjector
from services.node_agent.metrics import NodeAgentMetrics
from shared.errors import clip
from shared.events import DeviceHealth, Event, node_token
from shared.model import DeviceUUID

log = logging.getLogger(__name__)


def health_subject(node: str) -> str:
    """The subject of a node's health query."""
    return f"gpubus.query.health.{node_token(node)}"


def parse_health_request(payload: bytes, advertised: Advertised, node: str) -> HealthChange:
    """``{"uuid": "GPU-..." | "index": N, "healthy": bool, "reason": str}`` -> the change it asks for.

    ValueError (with a message for the caller) when it is not JSON, lacks ``healthy``, or names no
    GPU of this node."""
    try:
        body = json.loads(payload)
    except RecursionError as e:
        raise ValueError("health request is not JSON: nested too deep") from e
    except ValueError as e:
        raise ValueError(f"health request is not JSON: {e}") from e
    if not isinstance(body, dict) or not isinstance(body.get("healthy"), bool):
        raise ValueError('expected {"uuid" or "index", "healthy": bool, "reason"}')
    uuid, index = body.get("uuid"), body.get("index")
    if uuid is None and isinstance(index, int) and not isinstance(index, bool):
        uuid = advertised.physical_by_index(index)
    if not isinstance(uuid, str) or not advertised.known(uuid):
        raise ValueError(f"no GPU {clip(repr(body.get('uuid', index)))} on node {node}")
    reason = clip(str(body.get("reason", "")))
    return HealthChange(uuid=DeviceUUID(uuid), healthy=body["healthy"], reason=reason)


class Health:
    """One node's device health: follow the source, apply, count, publish; answer the health query."""

    def __init__(
        self,
        node: str,
        source: DeviceSource,
        advertised: Advertised,
        metrics: NodeAgentMetrics,
        emit: Callable[[Event], None],
    ) -> None:
        self._node = node
        self._source = source
        self._advertised = advertised
        self._metrics = metrics
        self._emit = emit
        self.count_devices(advertised.snapshot)

    @property
    def injectable(self) -> bool:
        """Whether the source takes injected changes (then the agent serves the health query)."""
        return isinstance(self._source, HealthInjector)

    async def follow(self) -> None:
        """Apply the source's health changes as they come, until the agent stops (an owned root task).

        A stream may end early without anything being wrong (NVML with health checks disabled, a
        node without GPUs): then there is nothing more to follow, and the task waits for the stop
        instead of ending, which would stop the agent."""
        async for change in self._source.health_changes():
            self.apply(change)
        await asyncio.get_running_loop().create_future()

    def apply(self, change: HealthChange) -> None:
        if not self._advertised.apply(change):
            return
        self._metrics.health_transitions.labels(healthy=str(change.healthy).lower()).inc()
        self.count_devices(self._advertised.snapshot)
        log.warning(
            "GPU %s on %s is now %s: %s",
            change.uuid,
            self._node,
            "healthy" if change.healthy else "unhealthy",
            change.reason,
        )
        health = DeviceHealth(node=self._node, uuid=change.uuid, healthy=change.healthy, reason=change.reason)
        self._emit(health)

    def count_devices(self, snapshot: Snapshot) -> None:
        healthy = sum(1 for d in snapshot.devices if d.health)
        self._metrics.devices.labels(health="healthy").set(healthy)
        self._metrics.devices.labels(health="unhealthy").set(len(snapshot.devices) - healthy)

    async def on_request(self, payload: bytes) -> bytes:
        """The health query: inject the change asked for. Answers ``{"ok": true, "uuid"}`` or
        ``{"ok": false, "error"}``."""
        try:
            change = parse_health_request(payload, self._advertised, self._node)
        except ValueError as e:
            self._metrics.bad_requests.labels(method="health_query").inc()
            return json.dumps({"ok": False, "error": clip(str(e))}).encode()
        assert isinstance(self._source, HealthInjector)
        self._source.inject(change)
        return json.dumps({"ok": True, "uuid": change.uuid}).encode()
