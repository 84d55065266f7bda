"""Composition root of ``gpubus dashboard``: bus -> seed from KV -> live follower -> HTTP server.

Reads NATS only (the ``inventory`` and ``allocations`` buckets once at start, then the
``GPUBUS`` stream), never the Kubernetes API, and writes nothing: it does not even create the
schema, so a subscribe-only NATS user serves it. Time travel (:meth:`Dashboard.view_at`) folds
the stream from the newest checkpoint before the moment (or from the stream's start) with the
same fold as the live view, and keeps the last few rebuilt views. Nothing else in the dashboard
constructs long-lived resources.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AsyncExitStack

from aiohttp import web
from prometheus_client import Counter

from services.dashboard.access import AccessRule, TokenGate, token_middleware
from services.dashboard.errors import ReplayUnavailable
from services.dashboard.metrics import DashboardStats, make_registry
from services.dashboard.pages import PageOptions
from services.dashboard.server import Deps, Pulse, build_app
from services.dashboard.settings import DashboardSettings
from services.dashboard.timeline import Raw, Timeline, absorb
from services.dashboard.view import ClusterView
from shared.bus import ALLOCATIONS, INVENTORY, Bus, BusSettings, read_typed, stream
from shared.bus.metrics import BusStatsCollector
from shared.component import Component
from shared.errors import BadInput, BusUnavailable, EventDecodeError
from shared.inventory_entries import decode_inventory_entry
from shared.kube import KubeClient
from shared.kube_config import kube_client
from shared.ledger_entries import decode_entry, is_entry_key
from shared.lifetime import Lifetime
from shared.service import bound_port
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""Between two looks for the stream and buckets while no other service has created them yet."""


class Dashboard(Component):
    """The dashboard: ``async with Dashboard(settings, bus) as d:`` serves on :attr:`port`."""

    def __init__(self, settings: DashboardSettings, bus: Bus, clock: Callable[[], float] = time.time,
                 gate: TokenGate | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.bus = bus
        self.clock = clock
        self.timeline = self._fresh_timeline()
        self.following: asyncio.Task[None] | None = None
        self.stats = DashboardStats()
        self.pulse = Pulse()
        self.follower = stream.Follower(bus, self._on_raw)
        self._replays: OrderedDict[float, ClusterView] = OrderedDict()
        self._replaying = asyncio.Lock()
        registry = make_registry(self._read_stats, lambda: self.deps.streams)
        registry.register(BusStatsCollector(lambda: bus.stats))
        self.deps = Deps(source=self, stats=self.stats, registry=registry, pulse=self.pulse,
                         options=PageOptions(pending_forget_s=settings.pending_forget_s,
                                             idle_after_s=settings.idle_after_s),
                         push_interval_s=settings.push_interval_s, max_streams=settings.max_streams,
                         clock=clock, middlewares=() if gate is None else (token_middleware(gate),))
        if gate is not None:
            access = Counter("gpubus_dashboard_access", "Dashboard requests by token verdict", ["verdict"],
                             registry=registry)
            gate.on_verdict = lambda verdict: access.labels(verdict.value).inc()
        self.runner = web.AppRunner(build_app(self.deps), access_log=None, handle_signals=False)
        self.port = 0

    async def _open(self, exits: AsyncExitStack) -> None:
        """Serve at once (``/readyz`` says 503 until the view has caught up), then follow the stream."""
        await self.runner.setup()
        exits.push_async_callback(self.runner.cleanup)
        site = web.TCPSite(self.runner, self.settings.bind, self.settings.port)
        await site.start()
        self.port = bound_port(self.runner, default=self.settings.port)
        log.info("dashboard serving http://%s:%d", self.settings.bind, self.port)
        exits.push_async_callback(self.follower.stop)
        self.following = asyncio.create_task(self._follow(), name="dashboard-follow")
        exits.push_async_callback(cancel_and_wait, self.following)

    async def _follow(self) -> None:
        """Seed and subscribe once the schema exists (the other services create it; we may not)."""
        while True:
            try:
                now = self.clock()
                await self._seed(now)
                if await self.follower.start(now - self.settings.history_s):
                    self.timeline.mark_caught_up()
                    _freeze()
                self.pulse.fire()
                return
            except BusUnavailable as e:
                log.warning("waiting for the gpubus stream and buckets: %s", e)
                await self.follower.stop()
                self.timeline = self._fresh_timeline()
                await asyncio.sleep(RETRY_S)  # the schema is another service's to create: look again

    def _fresh_timeline(self) -> Timeline:
        return Timeline(feed_size=self.settings.feed_size, checkpoints=self.settings.checkpoints,
                        checkpoint_interval_s=self.settings.checkpoint_interval_s,
                        trend_step_s=self.settings.trend_step_s,
                        finished_retention_s=self.settings.finished_retention_s)

    # -- the live view ------------------------------------------------------------------------
    async def _seed(self, now: float) -> None:
        """The buckets' current entries; an undecodable one is counted and skipped."""
        inventories = await read_typed(await self.bus.kv(INVENTORY), decode_inventory_entry, self._count_bad)
        allocations = await read_typed(await self.bus.kv(ALLOCATIONS), decode_entry, self._count_bad,
                                       keep=is_entry_key)
        self.timeline.seed(list(inventories.values.values()), list(allocations.values.values()), now)
        log.info("dashboard seeded with %d nodes and %d allocations",
                 len(inventories.values), len(allocations.values))

    def _count_bad(self, key: str, error: EventDecodeError) -> None:
        self.stats.undecodable += 1

    def _on_raw(self, raw: Raw, pending: int) -> None:
        behind = not self.timeline.caught_up
        self.timeline.on_message(raw, pending)
        if behind and self.timeline.caught_up:
            _freeze()
        self.pulse.fire()

    def _read_stats(self) -> DashboardStats:
        view = self.timeline.view
        self.stats.events = view.applied
        self.stats.fold_errors = self.follower.handler_errors
        undecodable = self.stats.undecodable + view.undecodable  # bucket entries + stream messages
        return DashboardStats(**{**_fields(self.stats), "undecodable": undecodable})

    # -- Source (for the server) -------------------------------------------------------------
    def ready(self) -> bool:
        return self.timeline.caught_up

    async def view_at(self, at: float) -> ClusterView:
        """The cluster at stream time ``at``, folded from a checkpoint or the stream's start."""
        if at >= self.timeline.view.at and self.timeline.caught_up:
            return self.timeline.view
        key = round(at, 1)
        async with self._replaying:  # one replay at a time: a slider must not start a dozen
            cached = self._replays.get(key)
            if cached is not None:
                self._replays.move_to_end(key)
                return cached
            view = await self._rebuild(at)
            self._replays[key] = view
            while len(self._replays) > self.settings.replay_cache:
                self._replays.popitem(last=False)
            return view

    async def _rebuild(self, at: float) -> ClusterView:
        base = self.timeline.checkpoint_before(at)
        retention = self.settings.finished_retention_s
        view = base if base is not None else ClusterView(finished_retention_s=retention)
        started = time.perf_counter()
        try:
            count = await stream.replay(self.bus, start=None if base is None else base.at, after_seq=view.seq,
                                        until=at, on_message=lambda raw: _fold(view, raw),
                                        timeout=self.settings.replay_timeout_s)
        except BusUnavailable as e:
            raise ReplayUnavailable(str(e)) from e
        log.info("time travel to %.1f: %d events folded onto %s in %.2fs", at, count,
                 "an empty view" if base is None else f"the checkpoint at {base.at:.1f}",
                 time.perf_counter() - started)
        return view

    async def bounds(self) -> tuple[float, float]:
        """Stream times of the first and last stored events (0, 0 for an empty stream)."""
        try:
            first = (await stream.bounds(self.bus)).first_at
        except BusUnavailable as e:
            raise ReplayUnavailable(str(e)) from e
        return first, self.timeline.view.at


def _freeze() -> None:
    """Once the backlog is folded, its objects (the view of every pod and card: ~300k at 1000
    nodes) leave the collector's reach: a full collection over them took 0.1-0.3 s, a stall that
    every page load and push shared. What is made later is collected as usual."""
    gc.collect()
    gc.freeze()


def _fold(view: ClusterView, raw: Raw) -> None:
    absorb(view, raw)


def _fields(stats: DashboardStats) -> dict[str, int]:
    return {name: getattr(stats, name) for name in DashboardStats.__dataclass_fields__}


async def run(settings: DashboardSettings, bus_settings: BusSettings, lifetime: Lifetime) -> None:
    """Serve until the lifetime ends (SIGTERM or SIGINT), then shut down cleanly."""
    async with AsyncExitStack() as exits:
        kube = await _reviewer(settings)
        if kube is not None:
            exits.push_async_callback(kube.close)
        bus = await Bus.connect(bus_settings, source="dashboard")
        exits.push_async_callback(bus.close)
        gate = None if kube is None else TokenGate(kube, AccessRule(namespace=settings.auth_namespace))
        dashboard = await exits.enter_async_context(Dashboard(settings, bus, gate=gate))
        # until the lifetime ends, or until following the stream fails for a reason other than NATS away
        try:
            assert dashboard.following is not None
            await dashboard.following  # raises what ended it; a clean end means it follows now
            await lifetime.wait()
        finally:
            log.info("dashboard shutting down")


async def _reviewer(settings: DashboardSettings) -> KubeClient | None:
    """The API client that reviews tokens (``auth = "kubernetes"``), or None (no login here)."""
    if settings.auth == "none":
        return None
    if settings.auth != "kubernetes":
        raise BadInput(f"dashboard auth {settings.auth!r}: give none or kubernetes")
    kube = await kube_client(settings)
    if kube is None:
        raise BadInput("dashboard auth kubernetes needs --kubeconfig or --in-cluster to review tokens")
    return kube
