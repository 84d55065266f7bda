"""Composition root of the node-agent: one :class:`NodeAgent` per node, and :func:`run` for the CLI.

A ``NodeAgent`` wires a device source, the advertised state, the handoff, the kubelet-side
server, the bus side (inventory, health, decisions, outcome events, leases) and optional
Kubernetes node annotation. Many agents may share one process and one bus (the simulator).
Every background task is owned by the agent's :class:`TaskSet` and stopped by :meth:`stop`.
Orchestration only; decisions live in the pure cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from services.node_agent.advertised import Advertised, Snapshot
from services.node_agent.background import TaskSet
from services.node_agent.discovery import DeviceSource, HealthChange, HealthInjector, HealthPolicy
from services.node_agent.errors import DiscoveryError
from services.node_agent.handoff import Handoff
from services.node_agent.inventory import node_resources
from services.node_agent.kubelet import PluginServer
from services.node_agent.metrics import NodeAgentMetrics
from services.node_agent.mig import MigPort
from services.node_agent.pending import Completed
from services.node_agent.plugin import DevicePluginServicer
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.simulated import SimulatedSource
from services.node_agent.verify import (
    Mismatch,
    PodResourcesClient,
    PodResourcesUnavailable,
    VerifyQueue,
    compare,
)
from shared.annotations import NODE_REGISTER, encode_node_devices
from shared.bus import ALLOCATIONS, INVENTORY, LOCKS, Bus, BusSettings, Lease, Route, Service
from shared.bus.metrics import BusStatsCollector
from shared.errors import BusUnavailable, EventDecodeError, GpubusError, clip
from shared.events import (
    AllocationDecided,
    AllocationMismatch,
    AllocationReleased,
    DeviceHealth,
    Event,
    Inventory,
    node_token,
)
from shared.handoff import device_counts, lease_key
from shared.inventory_entries import encode_inventory
from shared.kube import KubeApi
from shared.kube_config import kube_client
from shared.ledger_entries import decode_entry
from shared.model import Allocation, DeviceMode, DeviceUUID, PodUID

log = logging.getLogger(__name__)

_VERIFY_ATTEMPTS = 6
#: The events a node-agent acts on (``allocation.<verb>.<node>``); not the ones it publishes itself.
DECISION_SUBJECTS = (
    f"gpubus.{AllocationDecided.KIND}.*",
    f"gpubus.{AllocationReleased.KIND}.*",
)
_LEASE_RETRY_S = 1.0


def health_subject(node: str) -> str:
    return f"gpubus.query.health.{node_token(node)}"


def open_source(settings: NodeAgentSettings) -> DeviceSource | None:
    """Simulated if asked, else NVML; None (advertise nothing) when NVML fails and that is allowed."""
    if settings.simulate:
        return SimulatedSource(settings.node_name, settings.simulate)
    from services.node_agent.nvml import NvmlSource

    policy = HealthPolicy.parse(settings.disable_healthchecks, settings.enable_healthchecks)
    try:
        return NvmlSource.open(policy, settings.health_recovery_s, settings.preconfigured_device_memory)
    except DiscoveryError:
        if settings.fail_on_init_error:
            raise
        log.warning("NVML unavailable and --no-fail-on-init-error: advertising no GPUs", exc_info=True)
        return None


class _NoDevices:
    """The source of a node without usable GPUs (NVML failed, fail_on_init_error off)."""

    def devices(self) -> tuple[()]:
        return ()

    async def health_changes(self) -> AsyncIterator[HealthChange]:
        return
        yield  # makes this an async generator that ends at once

    async def close(self) -> None:
        return None


class NodeAgent:
    """Everything one node needs; :meth:`start` brings it up, :meth:`stop` takes it down."""

    def __init__(
        self,
        settings: NodeAgentSettings,
        *,
        source: DeviceSource | None,
        bus: Bus,
        kube: KubeApi | None = None,
        metrics: NodeAgentMetrics | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.settings = settings
        self.node = settings.node_name
        self.source: DeviceSource = source if source is not None else _NoDevices()
        self.bus = bus
        self.kube = kube
        self.metrics = metrics or NodeAgentMetrics()
        self.tasks = TaskSet(f"node-agent/{self.node}", on_fatal)
        self.advertised = Advertised(self.source.devices(), settings)
        self.handoff = Handoff(
            settings=settings,
            uuid_of=self.advertised.uuid_of,
            cards={d.id: d for d in self.advertised.snapshot.devices},
            emit=bus.emit,
            metrics=self.metrics,
            on_done=self._pod_done,
            mig=self.source if isinstance(self.source, MigPort) else None,
        )
        servicer = DevicePluginServicer(
            self.advertised, self.handoff, self.metrics, preferred=settings.enable_preferred_allocation
        )
        self.plugin = PluginServer(settings, servicer, self.metrics)
        self.pod_resources = (
            PodResourcesClient(settings.pod_resources_socket, settings.resource_name)
            if settings.pod_resources_socket
            else None
        )
        self._subscription: Route | None = None
        self._health_service: Service | None = None
        self._annotation = ""
        self._resources: dict[str, dict[str, str]] = {}
        self._verify_queue = VerifyQueue(settings.verify_delay_s, _VERIFY_ATTEMPTS)
        self._lease_revisions: dict[PodUID, dict[str, int]] = {}
        """Pod -> the Allocate leases its decision said the scheduler holds (key -> revision)."""
        self._verify_wakeup = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        # Routed from the process's one shared consumer (many agents in the simulator): decisions
        # published from now on arrive in order, across reconnects; older ones come from the KV.
        self._subscription = await self.bus.route(DECISION_SUBJECTS, node_token(self.node), self._on_event)
        await self._rebuild_from_kv()
        with contextlib.suppress(BusUnavailable):
            await self.bus.kv(LOCKS)  # opened now, so a release in an outage needs no extra request
        await self._reconcile_with_kubelet()
        if isinstance(self.source, HealthInjector):
            self._health_service = await self.bus.serve(health_subject(self.node), self._on_health_request)
        self._count_malformed_xids()
        if self.advertised.snapshot.devices:
            await self.plugin.start()
            self.tasks.spawn("kubelet-watch", self.plugin.run(), root=True)
        else:
            # As NVIDIA's plugin: with no devices there is no resource to register with the kubelet.
            log.warning("no GPUs to advertise on %s; not registering with the kubelet", self.node)
        self.tasks.spawn("health", self._health_loop(), root=True)
        self.tasks.spawn("inventory", self._inventory_loop(), root=True)
        if self.pod_resources is not None:
            self.tasks.spawn("verify", self._verify_loop(), root=True)
        self._count_devices(self.advertised.snapshot)
        log.info(
            "node-agent for %s up: %d GPUs, %d replicas",
            self.node,
            len(self.advertised.snapshot.devices),
            len(self.advertised.snapshot.replicas),
        )

    async def stop(self) -> None:
        if self._subscription is not None:
            await self._subscription.stop()
        if self._health_service is not None:
            await self._health_service.stop()
        await self.tasks.close()
        await self.plugin.stop()
        await self.source.close()
        if self.pod_resources is not None:
            await self.pod_resources.close()

    def _count_malformed_xids(self) -> None:
        policy = HealthPolicy.parse(self.settings.disable_healthchecks, self.settings.enable_healthchecks)
        if policy.malformed:
            self.metrics.bad_requests.labels(method="healthchecks_setting").inc(len(policy.malformed))
            log.warning("ignoring malformed XIDs in DP_DISABLE/ENABLE_HEALTHCHECKS: %s", policy.malformed)

    # -- decisions -----------------------------------------------------------------------------
    async def _on_event(self, event: Event) -> None:
        if isinstance(event, AllocationDecided):
            if event.leases and event.allocation.node == self.node:
                self._lease_revisions[event.allocation.pod_uid] = self._valid_revisions(event.leases)
            self.handoff.decided(event.allocation)
        elif isinstance(event, AllocationReleased):
            self._lease_revisions.pop(PodUID(event.pod_uid), None)
            self.handoff.released(PodUID(event.pod_uid), event.ts)
            await self.handoff.reclaim(PodUID(event.pod_uid))

    def _valid_revisions(self, leases: dict[str, int]) -> dict[str, int]:
        """A decision's lease revisions, without any that cannot be one (bus input: counted, dropped;
        those leases are released the owner-checked way)."""
        valid = {key: rev for key, rev in leases.items() if rev > 0}
        if len(valid) < len(leases):
            self.metrics.bad_requests.labels(method="decision_leases").inc()
            log.warning("decision names lease revisions that cannot be: %s", leases)
        return valid

    async def _rebuild_from_kv(self) -> None:
        try:
            entries = await (await self.bus.kv(ALLOCATIONS)).items()
        except BusUnavailable as e:
            log.warning("cannot rebuild pending decisions from KV now: %s", e)
            return
        allocations = []
        for key, entry in entries.items():
            try:
                allocations.append(decode_entry(key, entry.value))
            except EventDecodeError as e:
                self.metrics.bad_requests.labels(method="allocations_kv").inc()
                log.warning("allocations/%s skipped: %s", key, e)
        log.info("rebuilt %d pending decisions for %s from KV", self.handoff.rebuild(allocations), self.node)
        mig = [d.id for d in self.advertised.snapshot.devices if d.mode == DeviceMode.MIG]
        if mig:
            mine = [a for a in allocations if a.node == self.node]
            await self.handoff.recover_mig(mig, mine, destroy=len(allocations) == len(entries))

    async def _reconcile_with_kubelet(self) -> None:
        if self.pod_resources is None or not len(self.handoff.table):
            return
        try:
            self.handoff.reconcile(await self.pod_resources.assigned())
        except PodResourcesUnavailable as e:
            log.info("not reconciling with the kubelet: %s", e)

    def _pod_done(self, allocation: Allocation, completed: Completed | None) -> None:
        self.tasks.spawn(f"release-{allocation.pod_uid}", self._release_leases(allocation))
        if completed is not None and self.pod_resources is not None:
            self._verify_queue.add(allocation, asyncio.get_running_loop().time())
            self._verify_wakeup.set()

    async def _release_leases(self, allocation: Allocation) -> None:
        sizes = device_counts(allocation.devices)
        revisions = self._lease_revisions.pop(allocation.pod_uid, {})
        deadline = asyncio.get_running_loop().time() + self.bus.settings.lock_ttl_s
        for size in sizes:
            key = lease_key(self.node, size)
            while True:
                try:
                    lease = await self.bus.lease(key, allocation.pod_uid, auto_renew=False)
                    await self._release_lease(lease, revisions.get(key))
                    break
                except BusUnavailable as e:
                    if asyncio.get_running_loop().time() > deadline:
                        log.info("lease %s not released (%s); its TTL ends it", key, e)
                        break
                    await asyncio.sleep(_LEASE_RETRY_S)

    async def _release_lease(self, lease: Lease, revision: int | None) -> None:
        """One compare-and-delete at the decision's revision. When that loses, the hold is usually
        gone (the scheduler took the key over); if the pod still holds it, the revision was wrong
        (bus input: counted) and the hold is released the owner-checked way, not left to its TTL."""
        if await lease.release(revision) or revision is None:
            return
        if await lease.release():
            self.metrics.bad_requests.labels(method="decision_leases").inc()
            log.warning("lease %s of pod %s: the decision named revision %d, not the pod's; released anyway",
                        lease.key, lease.owner, revision)

    async def _verify_loop(self) -> None:
        """Check completed pods against the kubelet's pod resources, one ``List`` per due batch."""
        assert self.pod_resources is not None
        loop = asyncio.get_running_loop()
        window = self.settings.verify_delay_s / 2
        while True:
            due = self._verify_queue.next_due()
            wake = self._verify_wakeup.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake, None if due is None else max(0.0, due - loop.time()))
            self._verify_wakeup.clear()
            checks = self._verify_queue.take_due(loop.time(), window)
            if not checks:
                continue
            try:
                assigned = await self.pod_resources.assigned()
            except PodResourcesUnavailable as e:
                log.info("verify on %s: %s", self.node, e)
                assigned = None
            for check in checks:
                mismatches = None if assigned is None else compare(check.allocation, assigned)
                if mismatches is not None:
                    self._verified(check.allocation, mismatches)
                elif not self._verify_queue.retry(check, loop.time()):
                    self.metrics.verifications.labels(result="unlisted").inc()
                    log.info("verify %s/%s: the kubelet never listed the pod",
                             check.allocation.namespace, check.allocation.name)

    def _verified(self, allocation: Allocation, mismatches: list[Mismatch]) -> None:
        self.metrics.verifications.labels(result="mismatch" if mismatches else "ok").inc()
        for m in mismatches:
            self.metrics.mismatches.labels(where="pod_resources").inc()
            log.warning(
                "pod %s/%s container %s: kubelet assigned %s, decided %s",
                allocation.namespace,
                allocation.name,
                m.container,
                m.actual,
                m.expected,
            )
            self.bus.emit(
                AllocationMismatch(
                    node=self.node,
                    pod_uid=allocation.pod_uid,
                    namespace=allocation.namespace,
                    name=allocation.name,
                    container=m.container,
                    expected=m.expected,
                    actual=m.actual,
                )
            )

    # -- devices ---------------------------------------------------------------------------------
    async def _health_loop(self) -> None:
        async for change in self.source.health_changes():
            self.apply_health(change)

    def apply_health(self, change: HealthChange) -> None:
        if not self.advertised.apply(change):
            return
        self.metrics.health_transitions.labels(healthy=str(change.healthy).lower()).inc()
        self._count_devices(self.advertised.snapshot)
        log.warning(
            "GPU %s on %s is now %s: %s",
            change.uuid,
            self.node,
            "healthy" if change.healthy else "unhealthy",
            change.reason,
        )
        self.bus.emit(
            DeviceHealth(node=self.node, uuid=change.uuid, healthy=change.healthy, reason=change.reason)
        )

    def _count_devices(self, snapshot: Snapshot) -> None:
        healthy = sum(1 for d in snapshot.devices if d.health)
        self.metrics.devices.labels(health="healthy").set(healthy)
        self.metrics.devices.labels(health="unhealthy").set(len(snapshot.devices) - healthy)

    async def _on_health_request(self, payload: bytes) -> bytes:
        """``{"uuid": "GPU-..." | "index": N, "healthy": bool, "reason": str}`` -> ``{"ok": true}``."""
        try:
            change = self._parse_health_request(payload)
        except ValueError as e:
            self.metrics.bad_requests.labels(method="health_query").inc()
            return json.dumps({"ok": False, "error": clip(str(e))}).encode()
        assert isinstance(self.source, HealthInjector)
        self.source.inject(change)
        return json.dumps({"ok": True, "uuid": change.uuid}).encode()

    def _parse_health_request(self, payload: bytes) -> HealthChange:
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
            uuid = self.advertised.physical_by_index(index)
        if not isinstance(uuid, str) or not self.advertised.known(uuid):
            raise ValueError(f"no GPU {clip(repr(body.get('uuid', index)))} on node {self.node}")
        return HealthChange(
            uuid=DeviceUUID(uuid), healthy=body["healthy"], reason=clip(str(body.get("reason", "")))
        )

    async def _inventory_loop(self) -> None:
        """Publish the full inventory on start, on every change and every ``heartbeat_s``."""
        while True:
            snapshot = self.advertised.snapshot
            await self._publish_inventory(snapshot)
            await self._annotate_node(snapshot)
            await self._publish_resources(snapshot)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow the cancel of a stop
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.heartbeat_s):
                    await self.advertised.changed(snapshot.generation)

    async def _publish_inventory(self, snapshot: Snapshot) -> None:
        event = Inventory(
            node=self.node,
            source=self.bus.source,
            devices=snapshot.devices,
            heartbeat_s=self.settings.heartbeat_s,
            generation=snapshot.generation,
        )
        self.bus.emit(event)
        try:
            await (await self.bus.kv(INVENTORY)).put(self.node, encode_inventory(event))
        except BusUnavailable as e:
            log.info("inventory KV not written (%s); next heartbeat retries", e)

    async def _annotate_node(self, snapshot: Snapshot) -> None:
        """HAMi's register annotation, patched only when its JSON changes."""
        if self.kube is None:
            return
        value = encode_node_devices(snapshot.devices)
        if value == self._annotation:
            return
        try:
            await self.kube.patch_node(self.node, {"metadata": {"annotations": {NODE_REGISTER: value}}})
        except GpubusError as e:
            log.warning("cannot write %s on node %s: %s", NODE_REGISTER, self.node, e)
            return
        self._annotation = value


    async def _publish_resources(self, snapshot: Snapshot) -> None:
        """Memory and cores in the Node's capacity/allocatable, patched only when they change."""
        if self.kube is None or not self.settings.publish_capacity:
            return
        status = node_resources(snapshot.devices, self.settings)
        if status == self._resources:
            return
        try:
            await self.kube.patch_node_status(self.node, {"status": status})
        except GpubusError as e:
            log.warning("cannot publish GPU memory and cores on node %s: %s", self.node, e)
            return
        self._resources = status


async def metrics_server(settings: NodeAgentSettings, metrics: NodeAgentMetrics) -> web.AppRunner | None:
    """``/metrics`` on ``metrics_host:metrics_port`` (None when the port is 0)."""
    if not settings.metrics_port:
        return None
    app = web.Application()
    app.router.add_get("/metrics", make_aiohttp_handler(metrics.registry))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.metrics_host, settings.metrics_port).start()
    return runner


async def run(settings: NodeAgentSettings, bus_settings: BusSettings) -> None:
    """The process: connect, run one agent (+ metrics endpoint) until SIGTERM/SIGINT or a fatal error."""
    source = open_source(settings)
    stop = asyncio.Event()
    fatal: list[BaseException] = []

    def on_fatal(error: BaseException) -> None:
        fatal.append(error)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bus = await Bus.connect(bus_settings, source=f"node-agent/{settings.node_name}")
    kube = await kube_client(settings)
    agent = NodeAgent(settings, source=source, bus=bus, kube=kube, on_fatal=on_fatal)
    agent.metrics.registry.register(BusStatsCollector(lambda: bus.stats))
    metrics = await metrics_server(settings, agent.metrics)
    try:
        await bus.ensure_schema()
        await agent.start()
        await stop.wait()
    finally:
        await agent.stop()
        if metrics is not None:
            await metrics.cleanup()
        if kube is not None:
            await kube.close()
        await bus.close()
    if fatal:
        raise SystemExit(f"node-agent stopped: {fatal[0]!r}")
