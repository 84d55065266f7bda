"""Composition root of the node-agent: one :class:`NodeAgent` per node, and :func:`run` for the CLI.

A ``NodeAgent`` wires a device source, the advertised state, device health (health.py), the
inventory publisher (publisher.py), the handoff, the kubelet-side server, the pod resources
verifier (verify.py) and the decisions it routes to them. Many agents
may share one process and one bus (the simulator). Every background task is owned by the agent's
:class:`~shared.lifetime.TaskSet` and stopped by :meth:`stop`. Wiring only; what each part does
lives in its module.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from services.node_agent.advertised import Advertised
from services.node_agent.discovery import DeviceSource, HealthChange, HealthPolicy
from services.node_agent.dra_plugin import ClaimStore, DraPlugin, DraService, SlicePublisher
from services.node_agent.errors import DiscoveryError
from services.node_agent.handoff import Handoff, allocate_config
from services.node_agent.health import Health, health_subject
from services.node_agent.kubelet import PluginServer
from services.node_agent.metrics import NodeAgentMetrics
from services.node_agent.mig import MigPort
from services.node_agent.pending import Completed
from services.node_agent.plugin import DevicePluginServicer
from services.node_agent.publisher import InventoryPublisher
from services.node_agent.settings import MODE_LABEL, NodeAgentSettings
from services.node_agent.simulated import SimulatedSource
from services.node_agent.verify import PodResourcesClient, PodResourcesUnavailable, Verifier
from shared.bus import ALLOCATIONS, Bus, BusSettings, Route, read_typed
from shared.bus.metrics import BusStatsCollector
from shared.component import Component
from shared.config import SettingsError
from shared.errors import BusUnavailable, EventDecodeError
from shared.events import AllocationDecided, AllocationReleased, Event, node_token
from shared.kube import KubeApi, KubeClient
from shared.kube_config import kube_client
from shared.ledger_entries import decode_entry, is_entry_key
from shared.lifetime import FatalCallback, Lifetime, TaskSet
from shared.model import Allocation, DeviceMode, PodUID

log = logging.getLogger(__name__)

#: The events a node-agent acts on (``allocation.<verb>.<node>``); not the ones it publishes itself.
DECISION_SUBJECTS = (
    f"gpubus.{AllocationDecided.KIND}.*",
    f"gpubus.{AllocationReleased.KIND}.*",
)


def open_source(settings: NodeAgentSettings) -> DeviceSource | None:
    """Simulated if asked, else NVML; None (advertise nothing) when NVML fails and that is allowed."""
    if settings.simulate:
        return SimulatedSource(settings.node_name, settings.simulate)
    from services.node_agent.nvml import NvmlSource

    policy = HealthPolicy.parse(settings.disable_healthchecks, settings.enable_healthchecks)
    try:
        return NvmlSource.open(policy, settings.health_recovery_s, settings.preconfigured_device_memory)
    except DiscoveryError as e:
        if settings.fail_on_init_error:
            raise DiscoveryError(
                f"{e}. Install the NVIDIA driver, use --simulate, or --no-fail-on-init-error."
            ) from e
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


class NodeAgent(Component):
    """Everything one node needs: ``async with NodeAgent(settings, source=..., bus=...) as agent:``."""

    def __init__(
        self,
        settings: NodeAgentSettings,
        *,
        source: DeviceSource | None,
        bus: Bus,
        kube: KubeApi | None = None,
        metrics: NodeAgentMetrics | None = None,
        on_fatal: FatalCallback | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.node = settings.node_name
        self.source: DeviceSource = source if source is not None else _NoDevices()
        self.bus = bus
        self.kube = kube
        self.metrics = metrics or NodeAgentMetrics()
        self.tasks = TaskSet(f"node-agent/{self.node}", on_fatal)
        self.advertised = Advertised(self.source.devices(), settings)
        self.health = Health(self.node, self.source, self.advertised, self.metrics, bus.emit)
        self.publisher = InventoryPublisher(self.node, self.advertised, bus, kube, settings)
        self.handoff = Handoff(
            settings=settings,
            uuid_of=self.advertised.uuid_of,
            cards={d.id: d for d in self.advertised.snapshot.devices},
            emit=bus.emit,
            metrics=self.metrics,
            on_done=self._pod_done,
            mig=self.source if isinstance(self.source, MigPort) else None,
            on_stalled=self._resync_decisions,
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
        self.verifier = (
            None
            if self.pod_resources is None
            else Verifier(
                self.node, self.pod_resources, self.metrics, bus.emit, delay_s=settings.verify_delay_s
            )
        )
        self._subscription: Route | None = None
        """The decisions' route, once open (a stalled kubelet call resyncs it)."""
        self.dra: DraPlugin | None = None
        self.slices: SlicePublisher | None = None
        if settings.mode == "dra":
            if not isinstance(kube, KubeClient):
                raise DiscoveryError("DRA mode needs the Kubernetes API (--kubeconfig or in-cluster)")
            store = ClaimStore(Path(settings.dra_plugin_dir) / "claims", Path(settings.cdi_dir),
                               settings.dra_driver)
            service = DraService(settings=settings, advertised=self.advertised, store=store, kube=kube,
                                 config=allocate_config(settings), metrics=self.metrics, emit=bus.emit)
            self.dra = DraPlugin(settings, service, self.metrics)
            self.slices = SlicePublisher(settings, self.advertised, kube)

    # -- lifecycle ---------------------------------------------------------------------------
    async def _open(self, exits: AsyncExitStack) -> None:
        """Subscribe, rebuild from KV, serve the kubelet (device plugin or DRA), start the loops.

        Closed in reverse: the subscription and health service first (no new decision arrives while
        the rest stops), then the owned tasks, the kubelet side, the source."""
        exits.push_async_callback(self._close_source)
        exits.push_async_callback(self.plugin.stop)  # stopping a plugin that never started is a no-op
        if self.dra is not None:
            exits.push_async_callback(self.dra.stop)
        exits.push_async_callback(self.tasks.close)
        # Routed from the process's one shared consumer (many agents in the simulator): decisions
        # published from now on arrive in order, across reconnects; older ones come from the KV.
        self._subscription = await self.bus.route(DECISION_SUBJECTS, node_token(self.node), self._on_event)
        exits.push_async_callback(self._subscription.stop)
        if self.dra is None:
            await self._rebuild_from_kv()
        await self._reconcile_with_kubelet()
        if self.health.injectable:
            service = await self.bus.serve(health_subject(self.node), self.health.on_request)
            exits.push_async_callback(service.stop)
        self._count_malformed_xids()
        if self.dra is not None and self.slices is not None:
            # DRA mode: kube-scheduler places claims on the ResourceSlice; no device plugin. The
            # slice goes out once the kubelet took the plugin, so no claim is allocated here that
            # the kubelet cannot prepare yet (it would back off for up to a minute).
            await self.dra.start()
            await self.dra.wait_registered(self.settings.dra_register_wait_s)
            await self.slices.publish()
            self.tasks.spawn("resourceslice", self.slices.run(), root=True)
        elif self.advertised.snapshot.devices:
            await self.plugin.start()
            self.tasks.spawn("kubelet-watch", self.plugin.run(), root=True)
        else:
            # As NVIDIA's plugin: with no devices there is no resource to register with the kubelet.
            log.warning("no GPUs to advertise on %s; not registering with the kubelet", self.node)
        self.tasks.spawn("health", self.health.follow(), root=True)
        self.tasks.spawn("inventory", self.publisher.run(), root=True)
        if self.verifier is not None:
            self.tasks.spawn("verify", self.verifier.run(), root=True)
        log.info(
            "node-agent for %s up: %d GPUs, %d replicas",
            self.node,
            len(self.advertised.snapshot.devices),
            len(self.advertised.snapshot.replicas),
        )

    async def _close_source(self) -> None:
        await self.source.close()
        if self.pod_resources is not None:
            await self.pod_resources.close()

    def apply_health(self, change: HealthChange) -> None:
        """Apply a health change as if the source had reported it (tests, fault injection)."""
        self.health.apply(change)

    def _count_malformed_xids(self) -> None:
        policy = HealthPolicy.parse(self.settings.disable_healthchecks, self.settings.enable_healthchecks)
        if policy.malformed:
            self.metrics.bad_requests.labels(method="healthchecks_setting").inc(len(policy.malformed))
            log.warning("ignoring malformed XIDs in DP_DISABLE/ENABLE_HEALTHCHECKS: %s", policy.malformed)

    # -- decisions -----------------------------------------------------------------------------
    async def _on_event(self, event: Event) -> None:
        if self.dra is not None:
            return  # DRA mode: the kubelet's prepare carries the claim; decisions are for the monitor
        if isinstance(event, AllocationDecided):
            self.handoff.decided(event.allocation)
        elif isinstance(event, AllocationReleased):
            self.handoff.released(PodUID(event.pod_uid), event.ts)
            await self.handoff.reclaim(PodUID(event.pod_uid))

    async def _rebuild_from_kv(self) -> None:
        try:
            ledger = await read_typed(await self.bus.kv(ALLOCATIONS), decode_entry, self._count_bad_entry,
                                      keep=is_entry_key)
        except BusUnavailable as e:
            log.warning("cannot rebuild pending decisions from KV now: %s", e)
            return
        allocations = list(ledger.values.values())
        log.info("rebuilt %d pending decisions for %s from KV", self.handoff.rebuild(allocations), self.node)
        mig = [d.id for d in self.advertised.snapshot.devices if d.mode == DeviceMode.MIG]
        if mig:
            mine = [a for a in allocations if a.node == self.node]
            # a skipped entry might be one of ours: never destroy a MIG instance on a partial view
            await self.handoff.recover_mig(mig, mine, destroy=not ledger.skipped)

    def _count_bad_entry(self, key: str, error: EventDecodeError) -> None:
        self.metrics.bad_requests.labels(method="allocations_kv").inc()

    async def _reconcile_with_kubelet(self) -> None:
        if self.pod_resources is None or not len(self.handoff.table):
            return
        try:
            self.handoff.reconcile(await self.pod_resources.assigned())
        except PodResourcesUnavailable as e:
            log.info("not reconciling with the kubelet: %s", e)

    def _resync_decisions(self) -> None:
        """A kubelet call waits for a decision that has not come: re-create its consumer now."""
        if self._subscription is not None:
            self.metrics.decision_resyncs.inc()
            log.info("a kubelet call on %s waits for its decision: resyncing its consumer", self.node)
            self._subscription.resync()

    def _pod_done(self, allocation: Allocation, completed: Completed | None) -> None:
        if completed is not None and self.verifier is not None:
            self.verifier.completed(allocation)


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


async def resolve_mode(settings: NodeAgentSettings, kube: KubeClient | None) -> NodeAgentSettings:
    """``node-label`` mode made concrete from the Node's :data:`MODE_LABEL` (extender when unset)."""
    if settings.mode != "node-label":
        return settings
    if kube is None:
        raise SettingsError("mode node-label reads the Node's labels: it needs --kubeconfig or --in-cluster")
    node = await kube.request(f"get node {settings.node_name}", "GET", f"/api/v1/nodes/{settings.node_name}")
    mode = ((node.get("metadata") or {}).get("labels") or {}).get(MODE_LABEL, "extender")
    if mode not in ("extender", "dra"):
        raise SettingsError(f"node {settings.node_name}: label {MODE_LABEL}={mode!r} is not extender or dra")
    log.info("node %s runs in %s mode (label %s)", settings.node_name, mode, MODE_LABEL)
    return dataclasses.replace(settings, mode=mode)


async def run(settings: NodeAgentSettings, bus_settings: BusSettings, lifetime: Lifetime) -> None:
    """The ``gpubus node-agent`` process: one agent (+ metrics endpoint) until the lifetime ends
    (SIGTERM/SIGINT, or a root task that died)."""
    async with AsyncExitStack() as exits:
        source = open_source(settings)
        async with AsyncExitStack() as until_owned:  # closes the source until the agent owns it
            if source is not None:
                until_owned.push_async_callback(source.close)
            bus = await Bus.connect(bus_settings, source=f"node-agent/{settings.node_name}")
            exits.push_async_callback(bus.close)
            kube = await kube_client(settings)
            if kube is not None:
                exits.push_async_callback(kube.close)
            settings = await resolve_mode(settings, kube)
            metrics = NodeAgentMetrics()
            metrics.registry.register(BusStatsCollector(lambda: bus.stats))
            server = await metrics_server(settings, metrics)
            if server is not None:
                exits.push_async_callback(server.cleanup)
            await bus.ensure_schema()
            agent = NodeAgent(settings, source=source, bus=bus, kube=kube, metrics=metrics,
                              on_fatal=lifetime.fail)
            until_owned.pop_all()
        await exits.enter_async_context(agent)
        await lifetime.wait()
