"""Composition root of ``gpubus monitor``: settings -> sources -> monitors -> bus -> /metrics.

One :class:`MonitorApp` serves one or many nodes (the simulator runs one process for all its
nodes): a :class:`Monitor` per node, each with its own ledger, sources and cache directory, one
bus connection, one set of ledger subscriptions routed by node, and one ``/metrics`` endpoint
whose host metrics carry the ``node`` label. Every background task is named, owned (a
:class:`~shared.lifetime.TaskSet`) and awaited on :meth:`MonitorApp.stop`; if one ends the app
reports it to ``on_fatal`` (:func:`run`: the process stops loudly).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from services.monitor.cgroup import ProcCgroups
from services.monitor.metrics import MonitorCollector, make_registry
from services.monitor.monitor import Monitor, MonitorOptions
from services.monitor.readings import UsageSource
from services.monitor.settings import MonitorSettings, SourceKind
from services.monitor.sources.hamicore import CONTAINERS_DIR, HamiCoreSource
from services.monitor.sources.nvml import NvmlPort, NvmlSource, PynvmlPort
from services.monitor.sources.sim import SimSource
from shared.bus import ALLOCATIONS, ANY, INVENTORY, Bus, BusSettings, BusStats, read_typed
from shared.bus.metrics import BusStatsCollector
from shared.component import Component
from shared.errors import BusUnavailable, EventDecodeError
from shared.events import AllocationDecided, AllocationReleased, Event, Inventory, node_token
from shared.inventory_entries import decode_inventory_entry
from shared.kv_reading import decode_one
from shared.ledger_entries import decode_entry, is_entry_key
from shared.lifetime import FatalCallback, Lifetime, TaskSet
from shared.service import bound_port

log = logging.getLogger(__name__)

class KVPort(Protocol):
    async def items(self) -> dict[str, Any]: ...
    async def get(self, key: str) -> Any: ...


class BusPort(Protocol):
    """What the monitor needs of :class:`shared.bus.Bus`."""

    def emit(self, event: Event) -> None: ...
    async def route(
        self,
        subjects: tuple[str, ...],
        token: str,
        handler: Callable[[Event], Awaitable[None]],
        *,
        deliver: str | float = "new",
    ) -> Any: ...
    async def kv(self, bucket: str) -> Any: ...
    @property
    def stats(self) -> BusStats: ...


def build_sources(
    settings: MonitorSettings,
    node: str,
    nvml: Callable[[], NvmlPort] = PynvmlPort,
) -> list[UsageSource]:
    """The node's sources in configured (priority) order."""
    sources: list[UsageSource] = []
    for kind in settings.sources:
        if kind == SourceKind.HAMI_CORE:
            sources.append(HamiCoreSource(Path(settings.hook_path_for(node))))
        elif kind == SourceKind.NVML:
            sources.append(NvmlSource(nvml(), ProcCgroups(Path(settings.proc_root))))
        elif kind == SourceKind.SIM:
            sources.append(
                SimSource(
                    overuse=settings.sim_overuse,
                    overuse_factor=settings.sim_overuse_factor,
                    seed=settings.sim_seed,
                )
            )
    return sources


class MonitorApp(Component):
    """The monitors of one process, their bus wiring, loops and ``/metrics`` server
    (``async with MonitorApp.build(settings, bus) as app:``)."""

    def __init__(
        self,
        settings: MonitorSettings,
        monitors: Sequence[Monitor],
        bus: BusPort | None,
        on_fatal: FatalCallback | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.monitors = {m.node: m for m in monitors}
        self._holders: dict[str, str] = {}
        """Pod UID -> the node whose monitor holds its allocation: a release (which names no node)
        goes to that one monitor instead of all of them (100 in ``gpubus up``'s nodes process)."""
        self.bus = bus
        self.ledger_decode_errors = 0
        self.collector = MonitorCollector(
            self.monitors.values,
            legacy=settings.legacy_metrics,
            ledger_decode_errors=lambda: self.ledger_decode_errors,
        )
        self.registry = make_registry(self.collector)
        self.registry.register(BusStatsCollector(lambda: None if bus is None else bus.stats))
        self.metrics_port = 0
        self._tasks = TaskSet("monitor", on_fatal)

    @classmethod
    def build(
        cls,
        settings: MonitorSettings,
        bus: BusPort | None,
        nvml: Callable[[], NvmlPort] = PynvmlPort,
        on_fatal: FatalCallback | None = None,
    ) -> MonitorApp:
        emit = bus.emit if bus is not None else _drop
        monitors = []
        for node in settings.nodes:
            options = MonitorOptions(
                publish_interval_s=settings.publish_interval_s,
                max_containers_per_event=settings.max_containers_per_event,
                cleanup_grace_s=settings.cleanup_grace_s,
                containers_dir=(
                    Path(settings.hook_path_for(node)) / CONTAINERS_DIR
                    if SourceKind.HAMI_CORE in settings.sources
                    else None
                ),
            )
            monitors.append(Monitor(node, build_sources(settings, node, nvml), emit, options))
        return cls(settings, monitors, bus, on_fatal)

    # -- lifecycle ------------------------------------------------------------------------
    async def _open(self, exits: AsyncExitStack) -> None:
        """Sync ledgers, subscribe, serve /metrics and start the loops (closed in reverse)."""
        exits.callback(self._close_monitors)
        if self.bus is not None:
            subscription = await self._subscribe()
            exits.push_async_callback(_stop_quietly, subscription)
            await self.resync()
        runner = await self._serve_metrics()
        exits.push_async_callback(runner.cleanup)
        exits.push_async_callback(self._tasks.close)
        s, every = self.settings, self._every
        self._tasks.spawn("collect", every(s.interval_s, self.collect_once), root=True)
        if s.cleanup_interval_s > 0:
            self._tasks.spawn("cleanup", every(s.cleanup_interval_s, self.cleanup_once), root=True)
        if self.bus is not None and s.resync_interval_s > 0:
            self._tasks.spawn("resync", every(s.resync_interval_s, self.resync, delay=True), root=True)

    def _close_monitors(self) -> None:
        for m in self.monitors.values():
            m.close()

    # -- work -----------------------------------------------------------------------------
    async def collect_once(self) -> None:
        for m in self.monitors.values():
            m.cycle()

    async def cleanup_once(self) -> None:
        for m in self.monitors.values():
            m.cleanup()

    async def resync(self) -> None:
        """Rebuild every ledger from the ``allocations`` bucket (and devices from ``inventory``).

        An entry that is undecodable, or names another pod than its key (it would replace that
        pod's own entry in the ledger while KV keeps both), is counted and skipped."""
        assert self.bus is not None
        try:
            ledger = await read_typed(await self.bus.kv(ALLOCATIONS), decode_entry, self._count_bad,
                                      keep=is_entry_key)
            inventory = await self.bus.kv(INVENTORY)
            allocations = list(ledger.values.values())
            self._holders = {a.pod_uid: a.node for a in allocations if a.node in self.monitors}
            for m in self.monitors.values():
                m.ledger.replace_all(allocations)
                entry = await inventory.get(m.node)
                if entry is not None:
                    self._set_devices(m, entry.value)
        except BusUnavailable as e:
            log.warning("ledger resync failed, keeping the current view: %s", e)

    def _set_devices(self, monitor: Monitor, value: bytes) -> None:
        inventory = decode_one(INVENTORY, monitor.node, value, decode_inventory_entry, self._count_bad)
        if inventory is not None:
            monitor.ledger.devices = inventory.devices

    def _count_bad(self, key: str, error: EventDecodeError) -> None:
        self.ledger_decode_errors += 1

    async def on_event(self, event: Event) -> None:
        """Route a ledger or inventory event to the monitor(s) it concerns."""
        if isinstance(event, AllocationDecided):
            node, uid = event.allocation.node, event.allocation.pod_uid
            held = self._holders.get(uid)
            if held is not None and held != node:  # a newer decision moved the pod: one node holds it
                self.monitors[held].ledger.release(uid)
                del self._holders[uid]
            target = self.monitors.get(node)
            if target is not None:
                target.on_event(event)
                self._holders[uid] = node
        elif isinstance(event, AllocationReleased):
            held = self._holders.pop(event.pod_uid, None)
            if held is not None:
                self.monitors[held].on_event(event)
        elif isinstance(event, Inventory) and event.node in self.monitors:
            self.monitors[event.node].on_event(event)

    def subjects(self) -> list[str]:
        """One node: its own subjects (plus releases without a node); several: everything, routed here."""
        if len(self.monitors) == 1:
            token = node_token(next(iter(self.monitors)))
            return [
                f"gpubus.allocation.*.{token}",
                "gpubus.allocation.released._",
                f"gpubus.inventory.snapshot.{token}",
            ]
        return ["gpubus.allocation.>", "gpubus.inventory.>"]

    async def _subscribe(self) -> Any:
        assert self.bus is not None
        since = (
            time.time() - 2.0
        )  # replay what happens while the snapshot is read; applying twice is harmless
        # One ordered push consumer for every subject (no fetch polling, no acks): on_event only
        # updates the in-memory ledger, so a failure is a bug to log, not something to retry.
        return await self.bus.route(tuple(self.subjects()), ANY, self.on_event, deliver=since)

    async def _serve_metrics(self) -> web.AppRunner:
        web_app = web.Application()
        web_app.router.add_get("/metrics", make_aiohttp_handler(self.registry))
        web_app.router.add_get("/healthz", _healthz)
        runner = web.AppRunner(web_app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.settings.metrics_bind, self.settings.metrics_port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self.metrics_port = bound_port(runner, default=self.settings.metrics_port)
        log.info("serving /metrics on %s:%d", self.settings.metrics_bind, self.metrics_port)
        return runner

    async def _every(
        self, interval_s: float, work: Callable[[], Awaitable[None]], delay: bool = False
    ) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time() + (interval_s if delay else 0.0)
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            next_at = max(next_at + interval_s, loop.time())
            await work()


async def run(settings: MonitorSettings, bus_settings: BusSettings | None, lifetime: Lifetime) -> None:
    """The ``gpubus monitor`` process: connect (unless running without NATS), serve until the
    lifetime ends (a signal, a dead loop)."""
    async with AsyncExitStack() as exits:
        bus = None
        if bus_settings is not None:
            bus = await Bus.connect(bus_settings, source="monitor")
            exits.push_async_callback(bus.close)
            await bus.ensure_schema()
        await exits.enter_async_context(MonitorApp.build(settings, bus, on_fatal=lifetime.fail))
        await lifetime.wait()


async def _stop_quietly(subscription: Any) -> None:
    """Stop a subscription at shutdown; NATS gone by then is no error worth raising."""
    with contextlib.suppress(Exception):
        await subscription.stop()


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _drop(event: Event) -> None:
    log.debug("no bus: %s not published", event.KIND)
