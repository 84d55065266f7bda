"""Several scheduler replicas in one test: their start, the node they share, and binds through each.

The ``schedulers`` fixture (``scheduler_fixtures``) gives a test a :class:`Schedulers`; every
replica a test starts is stopped when it ends, the newest first.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from asyncwait import wait_until
from bus_settings import bus_settings
from scheduler_harness import ExtenderClient, create_node, gpu_pod, register_node, scheduler_app, slice_of

from gpubus_local.sim.kube import SimKubeClient
from services.scheduler.app import SchedulerApp
from services.scheduler.forward import BIND_SUBJECT
from shared.bus import Bus, QueryHandler
from shared.model import NodeName


async def create(kube: SimKubeClient, pod: dict[str, Any]) -> dict[str, Any]:
    return dict(await kube.create_pod("default", pod))  # type: ignore[arg-type]


async def add_node(
    bus: Bus, kube: SimKubeClient, *apps: SchedulerApp, node: str = "n1", **inventory: Any
) -> None:
    """Node object and inventory of ``node``, once every one of ``apps`` has it in its ledger."""
    await create_node(kube, node)
    await register_node(bus, node, **inventory)
    for app in apps:
        await wait_until(lambda app=app: NodeName(node) in app.ledger, what="inventory")


@dataclass(kw_only=True)
class Schedulers:
    """The schedulers a test starts, each with its settings over the harness defaults; all are
    stopped when the test ends, the newest first."""

    bus: Bus
    kube: SimKubeClient
    nats_url: str
    kubeconfig: Path
    stack: contextlib.AsyncExitStack
    session: aiohttp.ClientSession

    async def start(self, **settings: Any) -> SchedulerApp:
        return await self.stack.enter_async_context(
            scheduler_app(bus_settings(self.nats_url), self.kubeconfig, **settings))

    async def leader_of_n1(self, **settings: Any) -> SchedulerApp:
        """A scheduler that leads and has node n1 in its ledger."""
        app = await self.start(**settings)
        await wait_until(lambda: app.election.is_leader, what="leadership")
        await add_node(self.bus, self.kube, app)
        return app

    async def replicas(self, *names: str) -> list[SchedulerApp]:
        """Replicas with a 1 s leader TTL: the first leads before the others start, and those have
        node n1 in their ledgers."""
        first = await self.start(replica_id=names[0], leader_ttl_s=1.0)
        await wait_until(lambda: first.election.is_leader, what="first leader")
        others = [await self.start(replica_id=name, leader_ttl_s=1.0) for name in names[1:]]
        await add_node(self.bus, self.kube, *others)
        return [first, *others]

    async def standby_of(self, leader: str, *, serving: QueryHandler | None = None,
                         **settings: Any) -> SchedulerApp:
        """A standby ("standby") that has node n1 and knows ``leader`` as the leader: a holder of the
        leader lease (renewed until the standby has stopped) that answers forwarded binds with
        ``serving``, or serves nothing."""
        ghost = await self.bus.lease("leader.scheduler", leader, ttl=30.0, auto_renew=True)
        assert await ghost.acquire()
        self.stack.push_async_callback(ghost.release)  # after the standby has stopped
        if serving is not None:
            service = await self.bus.serve(BIND_SUBJECT, serving)
            self.stack.push_async_callback(service.stop)
        standby = await self.start(replica_id="standby", **settings)
        await add_node(self.bus, self.kube, standby)
        await wait_until(lambda: standby.election.leader == leader, what="leader known")
        return standby

    async def bind(self, app: SchedulerApp, pod: dict[str, Any]) -> str:
        """``pod`` bound to n1 through ``app``'s extender: "" or the extender's error."""
        return await ExtenderClient(self.session, app.port).bind(pod, "n1")


async def create_pods(kube: SimKubeClient, *names: str) -> list[dict[str, Any]]:
    """One-card 1000 MiB pods of these names."""
    return [await create(kube, gpu_pod(name, slice_of(1000))) for name in names]


