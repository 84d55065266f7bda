"""Composition root of ``gpubus scheduler``: wires settings, bus, Kubernetes, state, cores and HTTP.

Nothing else constructs long-lived resources. Every background task is named, owned here (a
:class:`~shared.lifetime.TaskSet` for every replica's, one for the leader's) and cancelled and
awaited when the app's ``async with`` ends; if one ends unexpectedly the app reports it to
``on_fatal`` (:func:`run`: the process stops loudly instead of limping).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from aiohttp import web

from services.scheduler.binder import Binder, BindOptions
from services.scheduler.bindphase import BindPhaseWriter
from services.scheduler.dra_follow import ClaimFollower
from services.scheduler.errors import TLSConfigError
from services.scheduler.extender import Extender
from services.scheduler.fit import Policies
from services.scheduler.forward import BindForwarder
from services.scheduler.handoff_slots import HandoffSlots
from services.scheduler.leader import LeaderElection
from services.scheduler.ledger import Ledger
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.nodeadmit import NodeBook
from services.scheduler.placement import Placement
from services.scheduler.pod_cache import PodCache
from services.scheduler.podconfirm import PodConfirmer
from services.scheduler.preemptor import KubePreemptionApi, Outcome, Preemptor
from services.scheduler.quota import NO_QUOTA, NamespaceQuota, namespace_quota
from services.scheduler.reconcile import Reconciler, verdicts_since
from services.scheduler.requeue import Requeuer
from services.scheduler.settings import SchedulerSettings
from services.scheduler.state import State
from services.scheduler.watched import AwaitingPods
from shared.bus import Bus, BusSettings, Subscription
from shared.bus.metrics import BusStatsCollector
from shared.component import Component
from shared.errors import BusUnavailable
from shared.kube import KubeApi, KubeClient
from shared.kube_config import kube_client
from shared.lifetime import FatalCallback, Lifetime, TaskSet
from shared.model import NodeName
from shared.quota_cache import QuotaCache

log = logging.getLogger(__name__)

#: How often lapsed in-process reservations are swept (they normally end within one bind).
_SWEEP_S = 5.0


class SchedulerApp(Component):
    """One scheduler replica: ``async with SchedulerApp(settings, bus_settings) as app:`` serves on
    :attr:`port`. Its parts that need NATS or Kubernetes are built in :meth:`_open`."""

    def __init__(
        self,
        settings: SchedulerSettings,
        bus_settings: BusSettings,
        *,
        kube: KubeApi | None = None,
        clock: Callable[[], float] = time.time,
        on_fatal: FatalCallback | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.bus_settings = bus_settings
        self.kube = kube
        self._own_kube = kube is None
        self.clock = clock
        self.replica = settings.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        self.ledger = Ledger()
        self.metrics = SchedulerMetrics(self.ledger, legacy=settings.legacy_metrics)
        self.names = settings.names()
        self.quotas: QuotaCache[NamespaceQuota] | None = None
        self.placement = Placement(
            self.ledger,
            Policies(node=settings.node_scheduler_policy, gpu=settings.gpu_scheduler_policy),
            single_node=settings.single_node_filter,
            quotas=self._quota_of,
            memory_factor=settings.memory_factor,
        )
        self.pods = PodCache()
        self.awaiting = AwaitingPods()
        self.nodes = NodeBook()
        self.requeuer = Requeuer(None)
        self.port = settings.port
        self._tasks = TaskSet("scheduler", on_fatal)
        self._leader_tasks = TaskSet("scheduler-leader", on_fatal)
        self._verdicts: list[Subscription] = []
        self._refusals: Subscription | None = None
        self.bus: Bus
        self.state: State
        self.slots: HandoffSlots
        self.binder: Binder
        self.reconciler: Reconciler
        self.election: LeaderElection
        self.forwarder: BindForwarder
        self.phases: BindPhaseWriter
        self.extender: Extender
        self.preemptor: Preemptor

    # --- lifecycle -------------------------------------------------------------------------

    async def _open(self, exits: AsyncExitStack) -> None:
        """Connect, wire the parts, load state from KV, start the owned tasks, then listen.

        The HTTP server starts last, after the ledger and inventory are loaded: no request is ever
        answered from a half-loaded picture (``/readyz`` is also false until then). Closed in
        reverse: the server, the owned tasks, the leader's part, the state, NATS.
        """
        tls = _tls_context(self.settings)  # unusable files stop the start before anything runs
        self.bus = await Bus.connect(self.bus_settings, source=f"scheduler/{self.replica}")
        exits.push_async_callback(self.bus.close)
        self.metrics.registry.register(BusStatsCollector(lambda: self.bus.stats))
        await self.bus.ensure_schema()
        if self.kube is None:
            self.kube = await _kube_from(self.settings)
            if self.kube is not None:
                exits.push_async_callback(self.kube.close)
        patches = self.metrics.requeue_patches
        self.requeuer = Requeuer(self.kube, on_patch=lambda outcome: patches.labels(outcome).inc())
        self._wire_quotas()
        if self.quotas is not None:
            exits.push_async_callback(self.quotas.close)
        self._wire_leadership()
        self._wire_binding()
        exits.push_async_callback(self.state.close)
        self._wire_reconciler()
        self._wire_preemption()
        self.extender = self._extender()
        self._live_gauges()
        exits.callback(self.slots.wake)  # no bind sleeps on past the end
        await self.state.load()
        exits.push_async_callback(self._deposed)
        exits.push_async_callback(self._tasks.close)
        self._launch()
        exits.push_async_callback(await self._serve(tls))

    def _wire_quotas(self) -> None:
        if self.kube is None:
            return
        s = self.settings
        self.quotas = QuotaCache(
            self.kube,
            self.names,
            functools.partial(namespace_quota, names=self.names),
            ttl_s=s.quota_refresh_s,
            timeout_s=s.quota_read_timeout_s,
            on_error=lambda kind: self.metrics.quota_errors.labels(kind).inc(),
        )
        self.metrics.watch_quotas(self.quotas.known)

    def _wire_binding(self) -> None:
        s = self.settings
        self.slots = HandoffSlots(self.ledger.entries_on, owner_alive=self._owner_alive)
        self.state = State(
            self.bus,
            self.ledger,
            clock=self.clock,
            on_change=self._on_change,
            on_input_error=self.metrics.input_error,
            on_node_back=lambda node: self.requeuer.nudge(f"node {node} is placeable again"),
        )
        self.binder = Binder(
            state=self.state,
            placement=self.placement,
            slots=self.slots,
            kube=self.kube,
            pods=self.pods,
            leadership=self.election,
            metrics=self.metrics,
            quotas=self.quotas,
            options=BindOptions(
                bind_timeout_s=s.bind_timeout_s,
                reservation_ttl_s=s.reservation_ttl_s,
                provisional_ttl_s=s.provisional_ttl_s,
                names=self.names,
                scheduler_name=s.scheduler_name,
            ),
            clock=self.clock,
            nodes=self.nodes,
            awaiting=self.awaiting,
        )

    def _wire_reconciler(self) -> None:
        self.phases = BindPhaseWriter(
            self.kube,
            label_nodes=self.settings.label_pods,
            on_outcome=lambda outcome: self.metrics.bind_phase_patches.labels(outcome).inc(),
        )
        self.reconciler = Reconciler(
            self.state,
            self.kube,
            binder=self.binder,
            phases=self.phases,
            metrics=self.metrics,
            scheduler_name=self.settings.scheduler_name,
            clock=self.clock,
            names=self.names,
            nodes=self.nodes,
            awaiting=self.awaiting,
            served=self.slots.served,
        )

    def _wire_preemption(self) -> None:
        kube = self.kube
        self.preemptor = Preemptor(
            placement=self.placement,
            api=KubePreemptionApi(kube) if isinstance(kube, KubeClient) else None,
            events=self.bus,
            leadership=self.election,
            clock=self.clock,
            names=self.names,
            hold_s=self.settings.preemption_hold_s,
            on_outcome=self._preemption_outcome,
        )

    def _preemption_outcome(self, outcome: Outcome) -> None:
        self.metrics.preemptions.labels(outcome.action).inc()
        if outcome.action != "held":
            log.info("preemption: %s", outcome)

    def _wire_leadership(self) -> None:
        s = self.settings
        self.election = LeaderElection(
            self.bus,
            key=s.leader_key,
            replica=self.replica,
            ttl=s.leader_ttl_s,
            on_elected=self._elected,
            on_deposed=self._deposed,
        )
        self.forwarder = BindForwarder(
            self.bus,
            timeout_s=s.forward_timeout_s,
            leader_name=lambda: self.election.leader,
            on_bad=lambda kind: self.metrics.bad_requests.labels("forwarded_bind", kind).inc(),
        )

    def _launch(self) -> None:
        """The owned tasks every replica runs (the leader's own start in :meth:`_elected`)."""
        if self.kube is not None:
            self._tasks.spawn("nodes", self.reconciler.watch_nodes(), root=True)
        if self.quotas is not None:
            self.quotas.want(self.ledger.namespaces())
        self._tasks.spawn("sweep", self._sweep(), root=True)
        self._tasks.spawn("bind-phase", self.phases.run(), root=True)
        self._tasks.spawn("election", self.election.run(), root=True)
        self._tasks.spawn("requeue", self.requeuer.run(), root=True)

    # --- wiring ----------------------------------------------------------------------------

    def _extender(self) -> Extender:
        return Extender(
            placement=self.placement,
            binder=self.binder,
            pods=self.pods,
            metrics=self.metrics,
            state=self.state,
            leadership=self.election,
            forwarder=self.forwarder,
            events=self.bus,
            clock=self.clock,
            names=self.names,
            confirmer=PodConfirmer(self.kube, self.reconciler.live),
            known_node=lambda name: NodeName(name) in self.ledger or NodeName(name) in self.nodes,
            requeuer=self.requeuer,
        )

    async def _serve(self, tls: ssl.SSLContext | None) -> Callable[[], Awaitable[None]]:
        """Listen; returns what stops listening."""
        runner = web.AppRunner(self.extender.app(), access_log=None, handle_signals=False,
                               shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.bind, self.settings.port, reuse_address=True,
                           ssl_context=tls)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        if self.settings.port == 0:
            self.port = _bound_port(site)
        log.info(
            "scheduler extender listening on %s:%d (replica %s)", self.settings.bind, self.port, self.replica
        )
        return runner.cleanup

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

    def _quota_of(self, namespace: str) -> NamespaceQuota:
        view = None if self.quotas is None else self.quotas.get(namespace)
        return NO_QUOTA if view is None else view

    def _owner_alive(self, uid: str) -> bool:
        return self.binder.owner_alive(uid)

    def _on_change(self, node: NodeName) -> None:
        self.slots.wake(node)
        if self.preemptor.holds:
            self.preemptor.on_change(node)

    async def _elected(self) -> None:
        # the term first: no decision before the ledger holds every one the old term got stored
        term = await self.state.begin_term(self.replica, within_s=self.settings.leader_ttl_s)
        log.info("replica %s decides in term %d", self.replica, term)
        # its own writes are all the bucket gets from here: no echoes (follow_ledger when deposed)
        await self.state.follow_own_writes()
        # forwarded binds next: standbys send them as soon as they see this replica lead, and a
        # bind needs neither the verdicts (replayed from ``since``) nor the pod watch
        await self.forwarder.serve(self.extender.bind_here)
        self.requeuer.nudge("this replica leads now")
        since = verdicts_since(self.ledger.entries(), self.clock(), self.settings.lease_ttl_s)
        self._verdicts = await self.reconciler.subscribe_verdicts(since)
        if self.kube is None:
            self.reconciler.pods_synced.set()  # no pods to watch
        else:
            self._leader_tasks.spawn("pods", self.reconciler.watch_pods(), root=True)
        if self.settings.dra_driver and isinstance(self.kube, KubeClient):
            follower = ClaimFollower(self.kube, self.bus, self.ledger, driver=self.settings.dra_driver,
                                     clock=self.clock)
            self._leader_tasks.spawn("dra-claims", follower.run(), root=True)
        if self.settings.preemption:
            self._refusals = await self.bus.subscribe("gpubus.pod.unschedulable.>", self.preemptor.on_event)

    async def _deposed(self) -> None:
        self.state.end_term()
        try:  # what a deposed leader's late writes did meanwhile (the sweep retries a failure)
            await self.state.follow_ledger()
        except BusUnavailable as e:
            log.warning("replica %s: ledger not followed again yet: %s", self.replica, e)
        await self.forwarder.stop()
        await self._leader_tasks.close()
        for sub in self._verdicts:
            await sub.stop()
        self._verdicts = []
        await self.reconciler.close()
        if self._refusals is not None:
            await self._refusals.stop()
            self._refusals = None
        await self.preemptor.close()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            if not self.election.is_leader:
                with contextlib.suppress(BusUnavailable):
                    await self.state.follow_ledger()  # a no-op unless _deposed could not resume it
            for lapsed in self.ledger.expire(self.clock()):
                log.warning("reservation for %s/%s on %s lapsed", lapsed.namespace, lapsed.name, lapsed.node)
                self.slots.wake(lapsed.node)


def _tls_context(settings: SchedulerSettings) -> ssl.SSLContext | None:
    """HTTPS for the extender when a certificate is set; client certificates when a CA is."""
    if not settings.tls_cert:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(settings.tls_cert, settings.tls_key or None)
        if settings.tls_client_ca:
            ctx.load_verify_locations(settings.tls_client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as e:
        raise TLSConfigError(f"cannot use the extender's TLS files ({settings.tls_cert}, "
                          f"{settings.tls_client_ca or 'no client CA'}): {e}") from e
    return ctx


def _bound_port(site: web.TCPSite) -> int:
    server: Any = site._server
    return int(server.sockets[0].getsockname()[1])


async def run(settings: SchedulerSettings, bus_settings: BusSettings, lifetime: Lifetime) -> None:
    """The ``gpubus scheduler`` process: one replica until the lifetime ends (a signal, a dead task)."""
    async with SchedulerApp(settings, bus_settings, on_fatal=lifetime.fail):
        # The loaded ledger, inventory and modules live as long as the process: keep the cyclic GC
        # from walking them again on every full collection.
        gc.freeze()
        await lifetime.wait()


async def _kube_from(settings: SchedulerSettings) -> KubeApi | None:
    kube = await kube_client(settings)
    if kube is None:
        log.warning("no Kubernetes API configured: filter/prioritize work, bind answers an Error")
    return kube
