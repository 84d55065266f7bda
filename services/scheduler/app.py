"""Composition root of ``gpubus scheduler``: wires settings, bus, Kubernetes, state, cores and HTTP.

Nothing else constructs long-lived resources. Every background task is named, owned here and
cancelled and awaited on :meth:`SchedulerApp.stop`; if one dies unexpectedly the app logs it and
``run`` returns, so the process stops loudly instead of limping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from services.scheduler.binder import Binder, BindOptions, PodCache
from services.scheduler.bindphase import BindPhaseWriter
from services.scheduler.extender import Extender
from services.scheduler.fit import Policies
from services.scheduler.forward import BindForwarder
from services.scheduler.leader import LeaderElection
from services.scheduler.leases import AllocLeases
from services.scheduler.ledger import Ledger
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.placement import Placement
from services.scheduler.reconcile import Reconciler
from services.scheduler.settings import SchedulerSettings
from services.scheduler.state import State
from shared.bus import Bus, BusSettings, Subscription
from shared.kube import KubeApi, KubeClient
from shared.model import NodeName

log = logging.getLogger(__name__)

#: How often lapsed in-process reservations are swept (they normally end within one bind).
_SWEEP_S = 5.0


class SchedulerApp:
    """One scheduler replica. ``await start()``, then ``port`` is bound; ``await stop()`` ends it."""

    def __init__(
        self,
        settings: SchedulerSettings,
        bus_settings: BusSettings,
        *,
        kube: KubeApi | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.bus_settings = bus_settings
        self.kube = kube
        self._own_kube = kube is None
        self.clock = clock
        self.replica = settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        self.ledger = Ledger()
        self.metrics = SchedulerMetrics(self.ledger, legacy=settings.legacy_metrics)
        self.placement = Placement(
            self.ledger,
            Policies(node=settings.node_scheduler_policy, gpu=settings.gpu_scheduler_policy),
            single_node=settings.single_node_filter,
        )
        self.pods = PodCache()
        self.port = settings.port
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._leader_tasks: dict[str, asyncio.Task[None]] = {}
        self._verdicts: list[Subscription] = []
        self._runner: web.AppRunner | None = None
        self.bus: Bus
        self.state: State
        self.leases: AllocLeases
        self.binder: Binder
        self.reconciler: Reconciler
        self.election: LeaderElection
        self.forwarder: BindForwarder
        self.phases: BindPhaseWriter
        self.extender: Extender

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        self.bus = await Bus.connect(self.bus_settings, source=f"scheduler/{self.replica}")
        await self.bus.ensure_schema()
        if self.kube is None:
            self.kube = await _kube_from(s)
        self.leases = AllocLeases(self.bus, ttl=s.lease_ttl_s, owner_alive=self._owner_alive)
        self.state = State(self.bus, self.ledger, clock=self.clock, on_change=self._on_change)
        self.binder = Binder(
            state=self.state,
            placement=self.placement,
            leases=self.leases,
            kube=self.kube,
            pods=self.pods,
            is_leader=lambda: self.election.is_leader,
            leader_name=lambda: self.election.leader,
            options=BindOptions(
                bind_timeout_s=s.bind_timeout_s,
                reservation_ttl_s=s.reservation_ttl_s,
                label_pods=s.label_pods,
            ),
            clock=self.clock,
            on_lease_wait=self.metrics.lease_wait_seconds.observe,
        )
        self.phases = BindPhaseWriter(
            self.kube, on_outcome=lambda outcome: self.metrics.bind_phase_patches.labels(outcome).inc()
        )
        self.reconciler = Reconciler(
            self.state,
            self.leases,
            self.kube,
            scheduler_name=s.scheduler_name,
            in_flight=self.binder.binding,
            on_release=lambda why: self.metrics.released.labels(why).inc(),
            on_adopt=self.metrics.adopted.inc,
            clock=self.clock,
            on_phase=self.phases.submit,
        )
        self.election = LeaderElection(
            self.bus,
            key=s.leader_key,
            replica=self.replica,
            ttl=s.leader_ttl_s,
            on_elected=self._elected,
            on_deposed=self._deposed,
        )
        self.forwarder = BindForwarder(
            self.bus, timeout_s=s.forward_timeout_s, leader_name=lambda: self.election.leader
        )
        self.extender = self._extender()
        self._live_gauges()
        await self.leases.start()
        await self.state.load()
        if self.kube is not None:
            self._spawn(self._tasks, "scheduler-nodes", self.reconciler.watch_nodes())
        self._spawn(self._tasks, "scheduler-sweep", self._sweep())
        self._spawn(self._tasks, "scheduler-bind-phase", self.phases.run())
        self._spawn(self._tasks, "scheduler-election", self.election.run())
        await self._serve()

    async def stop(self) -> None:
        await self._cancel(self._tasks)
        await self._deposed()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.binder.close()
        await self.leases.close()
        await self.state.close()
        await self.bus.close()
        if self._own_kube and self.kube is not None:
            await self.kube.close()

    async def run(self) -> None:
        """Serve until cancelled or until an owned task dies."""
        await self.start()
        try:
            done, _ = await asyncio.wait(list(self._tasks.values()), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                log.error(
                    "task %s ended; stopping the scheduler",
                    task.get_name(),
                    exc_info=task.exception() if not task.cancelled() else None,
                )
        finally:
            await self.stop()

    # --- wiring ----------------------------------------------------------------------------

    def _extender(self) -> Extender:
        return Extender(
            placement=self.placement,
            binder=self.binder,
            pods=self.pods,
            metrics=self.metrics,
            ready=lambda: self.state.ready,
            emit=self.bus.emit,
            clock=self.clock,
            is_leader=lambda: self.election.is_leader,
            forward=self.forwarder.forward,
        )

    async def _serve(self) -> None:
        self._runner = web.AppRunner(
            self.extender.app(), access_log=None, handle_signals=False, shutdown_timeout=2.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.bind, self.settings.port, reuse_address=True)
        await site.start()
        if self.settings.port == 0:
            self.port = _bound_port(site)
        log.info(
            "scheduler extender listening on %s:%d (replica %s)", self.settings.bind, self.port, self.replica
        )

    def _live_gauges(self) -> None:
        def stale() -> float:
            now = self.clock()
            invs = (self.ledger.inventory(n) for n in self.ledger.nodes())
            return float(sum(1 for inv in invs if inv is not None and inv.stale(now)))

        self.metrics.watch(
            {
                "gpubus_scheduler_ledger_entries": (
                    "Entries in the allocation ledger",
                    lambda: float(len(self.ledger)),
                ),
                "gpubus_scheduler_nodes": ("Nodes with inventory", lambda: float(len(self.ledger.nodes()))),
                "gpubus_scheduler_stale_nodes": ("Nodes whose inventory heartbeat is stale", stale),
                "gpubus_scheduler_leader": (
                    "1 if this replica binds",
                    lambda: float(self.election.is_leader),
                ),
                "gpubus_scheduler_ready": (
                    "1 once inventory and ledger are loaded",
                    lambda: float(self.state.ready),
                ),
            }
        )

    def _owner_alive(self, uid: str) -> bool:
        return self.binder.owner_alive(uid)

    def _on_change(self, node: NodeName) -> None:
        self.leases.wake(node)

    async def _elected(self) -> None:
        since = self.clock() - 2 * self.settings.lease_ttl_s
        self._verdicts = await self.reconciler.subscribe_verdicts(since)
        self._spawn(self._leader_tasks, "scheduler-pods", self.reconciler.watch_pods())
        await self.forwarder.serve(self.extender.bind_here)

    async def _deposed(self) -> None:
        await self.forwarder.stop()
        await self._cancel(self._leader_tasks)
        for sub in self._verdicts:
            await sub.stop()
        self._verdicts = []

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            for lapsed in self.ledger.expire(self.clock()):
                log.warning("reservation for %s/%s on %s lapsed", lapsed.namespace, lapsed.name, lapsed.node)
                self.leases.wake(lapsed.node)

    @staticmethod
    def _spawn(where: dict[str, asyncio.Task[None]], name: str, coro: Coroutine[Any, Any, None]) -> None:
        where[name] = asyncio.create_task(coro, name=name)

    @staticmethod
    async def _cancel(where: dict[str, asyncio.Task[None]]) -> None:
        tasks = list(where.values())
        where.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _bound_port(site: web.TCPSite) -> int:
    server: Any = site._server
    return int(server.sockets[0].getsockname()[1])


async def _kube_from(settings: SchedulerSettings) -> KubeApi | None:
    if settings.in_cluster:
        return await KubeClient.in_cluster()
    if settings.kubeconfig:
        return await KubeClient.from_kubeconfig(settings.kubeconfig)
    log.warning("no Kubernetes API configured: filter/prioritize work, bind answers an Error")
    return None
