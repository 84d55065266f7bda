"""The simulated-nodes process of ``gpubus up``: N node-agents, N kubelet stand-ins and one monitor.

Every node has a real :class:`NodeAgent` (simulated GPUs) and a :class:`SimNode` (kubelet stand-in
plus pod lifecycle) talking real gRPC over unix sockets; all agents share one NATS connection and
one Kubernetes client, and one :class:`MonitorApp` (sim source) covers every node; its /metrics
also counts the kubelets' events. For tests it answers ``gpubus.query.sim.<node>``
(``{"action": "restart-agent" | "stop-agent" | "start-agent" | "restart-kubelet"}``) and writes
what each kubelet received from Allocate to a JSON-lines file.

``part`` splits it in two processes over one hosts directory (``bench/e2e.py`` measures the
node-agents' CPU apart from the stand-ins that way): ``hosts`` runs the kubelets and the monitor,
``agents`` the node-agents, which find the kubelets' sockets there as on a real node. A split
process answers no control requests (they act on both halves).

Composition only: the parts live in ``services/node_agent``, this package and ``services/monitor``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from gpubus_local.sim.control import stop_on_signals, write_ready
from gpubus_local.sim.descriptors import DescriptorLimitError, ensure_descriptors
from gpubus_local.sim.event_metrics import RecorderStatsCollector
from gpubus_local.sim.events import RecorderSettings
from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.node import Admitted, SimNode, SimNodeSettings, parse_duration
from gpubus_local.sim.node_identity import ensure_namespace, node_token_file
from gpubus_local.stack_scratch import host_scratch_root
from services.monitor.app import MonitorApp
from services.monitor.settings import MonitorSettings
from services.node_agent.app import NodeAgent
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.simulated import SimulatedSource
from shared.bus import Bus, BusSettings
from shared.events import node_token
from shared.lifetime import FatalCallback

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodesSpec:
    nodes: int
    devices: str
    kubeconfig: Path
    nats_url: str
    nats_replicas: int = 1
    """Copies of the event stream and buckets (``BusSettings.replicas``)."""
    prefix: str = "node"
    split_count: int = 10
    pod_duration: str = "60s"
    metrics_port: int = 0
    metrics_bind: str = "127.0.0.1"
    """The monitor's /metrics address (0.0.0.0 under compose, for the published port)."""
    heartbeat_s: float = 10.0
    admissions_log: Path | None = None
    ready_file: Path | None = None
    monitor_interval_s: float = 5.0
    normal_events: bool = True
    """The kubelets record Started events (Warnings always)."""
    pod_log_dir: Path | None = None
    """Where the kubelets keep container logs (shared with the API server, which serves them)."""
    part: Part = "all"
    """What this process runs: everything, the kubelets and monitor (``hosts``) or the node-agents."""
    hosts_dir: Path | None = None
    """The hosts' sockets and files (a split's two processes share it); None: a temporary directory."""
    node_identity: bool = False
    """Each node-agent connects as its own node (its pod's token, NATS auth callout), on a connection
    of its own; the monitor and the test controls keep the shared one (:mod:`gpubus_local.stack_identity`)."""


#: ``all``: node-agents, kubelets and monitor; ``hosts``: kubelets and monitor; ``agents``: node-agents.
Part = Literal["all", "hosts", "agents"]
PARTS: tuple[Part, ...] = ("all", "hosts", "agents")


def _has_devices(sim: SimNode) -> Callable[[], bool]:
    return lambda: bool(sim.kubelet.devices())


def control_subject(node: str) -> str:
    return f"gpubus.query.sim.{node_token(node)}"


def build_monitor(spec: NodesSpec, names: list[str], bus: Bus | None,
                  sims: Mapping[str, SimNode], on_fatal: FatalCallback | None = None) -> MonitorApp:
    """The monitor of every node; its /metrics also counts the kubelets' events
    (``gpubus_sim_events_*_total``, summed over ``sims``). A monitor loop that ends is ``on_fatal``."""
    monitor = MonitorApp.build(MonitorSettings(
        nodes=tuple(names), sources=("sim",), metrics_bind=spec.metrics_bind,
        metrics_port=spec.metrics_port, interval_s=spec.monitor_interval_s,
        publish_interval_s=spec.monitor_interval_s, cleanup_interval_s=0), bus, on_fatal=on_fatal)
    monitor.registry.register(RecorderStatsCollector(lambda: [sim.events.stats for sim in sims.values()]))
    return monitor


class SimCluster:
    """The nodes of one process and what they share."""

    def __init__(self, spec: NodesSpec, bus: Bus, kube: SimKubeClient) -> None:
        self.spec, self.bus, self.kube = spec, bus, kube
        self._own_sockets = spec.hosts_dir is None
        self.sockets = (Path(tempfile.mkdtemp(prefix="gpubus-", dir=host_scratch_root()))
                        if spec.hosts_dir is None else spec.hosts_dir)
        self.sockets.mkdir(parents=True, exist_ok=True)
        log.info("simulated hosts' files in %s", self.sockets)
        self.names = [f"{spec.prefix}-{i}" for i in range(1, spec.nodes + 1)]
        self.sims: dict[str, SimNode] = {}
        self.agents: dict[str, NodeAgent] = {}
        self.node_buses: dict[str, Bus] = {}
        """Per-node connections (``node_identity``); a node without one uses the shared ``bus``."""
        self.fatal = asyncio.Event()
        self.monitor: MonitorApp | None = None
        self._running: dict[str, AsyncExitStack] = {}
        """What :meth:`stop` closes: each agent's own (to restart one alone), then ``monitor``'s."""
        self._log: IO[str] | None = (spec.admissions_log.open("a", buffering=1)
                                     if spec.admissions_log else None)

    def _on_fatal(self, error: BaseException) -> None:
        log.error("a simulated node died: %r", error)
        self.fatal.set()

    def _agent_settings(self, node: str) -> NodeAgentSettings:
        d = self.sockets / node
        return NodeAgentSettings(node_name=node, simulate=self.spec.devices,
                                 device_split_count=self.spec.split_count,
                                 plugin_dir=str(d / "dp"), pod_resources_socket=str(d / "pr.sock"),
                                 hook_path=str(self.sockets / "hook"), metrics_port=0,
                                 heartbeat_s=self.spec.heartbeat_s)

    def _new_agent(self, node: str, source: SimulatedSource | None = None) -> NodeAgent:
        settings = self._agent_settings(node)
        return NodeAgent(settings, source=source or SimulatedSource(node, settings.simulate),
                         bus=self.node_buses.get(node, self.bus),
                         kube=self.kube, on_fatal=self._on_fatal)

    def _record(self, admitted: Admitted) -> None:
        if self._log is None:
            return
        containers = {name: {"device_ids": list(c.device_ids), "envs": c.envs}
                      for name, c in admitted.containers.items()}
        record = {"node": admitted.node, "namespace": admitted.namespace, "name": admitted.name,
                  "uid": admitted.uid, "containers": containers}
        self._log.write(json.dumps(record) + "\n")

    async def connect_nodes(self) -> None:
        """Each node's own connection, as its node (``node_identity``): its pod, token and identity."""
        tokens = self.sockets / "tokens"
        tokens.mkdir(exist_ok=True)
        await ensure_namespace(self.kube)
        for node in self.names:
            token = await node_token_file(self.kube, node, tokens)
            settings = BusSettings(url=self.spec.nats_url, name=f"gpubus-node-agent-{node}",
                                   reconnect_wait_s=0.25, token_file=str(token), node=node)
            self.node_buses[node] = await Bus.connect(settings, source="node-agent")

    async def start(self) -> None:
        part = self.spec.part
        if self.spec.node_identity and part != "hosts":
            await self.connect_nodes()
        for i, node in enumerate(self.names):
            source = SimulatedSource(node, self.spec.devices)
            if part != "agents":
                await self._start_host(i, node, source)
            if part != "hosts":
                await self._enter_agent(node, self._new_agent(node, source))
            if part == "all":
                await self.bus.serve(control_subject(node), self._control_handler(node))
        if part == "agents":
            return  # the hosts' process waits for the registrations
        for node, sim in self.sims.items():
            await sim.kubelet.wait_for(_has_devices(sim), timeout=60.0)
            await asyncio.wait_for(sim.synced.wait(), 60.0)
            log.debug("node %s registered", node)
        monitor = build_monitor(self.spec, self.names, self.bus, self.sims, self._on_fatal)
        exits = self._running["monitor"] = AsyncExitStack()
        self.monitor = await exits.enter_async_context(monitor)

    async def _start_host(self, i: int, node: str, source: SimulatedSource) -> None:
        """The node's kubelet stand-in and pod lifecycle."""
        d = self.sockets / node
        duration = parse_duration(self.spec.pod_duration, 60.0)
        # the same made-up GPUs the agent reports; their names only matter to the pod logs
        gpu_names = ({str(gpu.uuid): gpu.name for gpu in source.devices()}
                     if self.spec.pod_log_dir is not None else {})
        settings = SimNodeSettings(node=node, plugin_dir=d / "dp", pod_resources_socket=d / "pr.sock",
                                   default_duration_s=duration, host_ip=f"10.0.{i // 250}.{i % 250 + 1}",
                                   events=RecorderSettings(normal=self.spec.normal_events),
                                   log_dir=self.spec.pod_log_dir, gpu_names=gpu_names)
        sim = SimNode(settings, self.kube, on_admitted=self._record, on_fatal=self._on_fatal)
        await sim.start()
        self.sims[node] = sim

    async def _enter_agent(self, node: str, agent: NodeAgent) -> None:
        exits = self._running[f"agent/{node}"] = AsyncExitStack()
        self.agents[node] = await exits.enter_async_context(agent)

    async def _stop_agent(self, node: str) -> None:
        self.agents.pop(node, None)
        exits = self._running.pop(f"agent/{node}", None)
        if exits is not None:
            await exits.aclose()

    async def _start_agent(self, node: str) -> None:
        if node not in self.agents:
            await self._enter_agent(node, self._new_agent(node))

    async def _restart_kubelet(self, node: str) -> None:
        """Restart, then wait until the plugin has registered again and listed its devices."""
        kubelet = self.sims[node].kubelet
        before = kubelet.registrations
        await self.sims[node].restart_kubelet()
        if node in self.agents:
            await kubelet.wait_for(lambda: kubelet.registrations > before and bool(kubelet.devices()), 30.0)

    def _control_handler(self, node: str) -> Callable[[bytes], Awaitable[bytes]]:
        async def restart_agent(n: str) -> None:
            await self._stop_agent(n)
            await self._start_agent(n)

        actions: dict[str, Callable[[str], Awaitable[None]]] = {
            "restart-agent": restart_agent, "stop-agent": self._stop_agent, "start-agent": self._start_agent,
            "restart-kubelet": self._restart_kubelet}

        async def handle(payload: bytes) -> bytes:
            try:
                action = json.loads(payload).get("action")
                if action not in actions:
                    raise ValueError(f"unknown action {action!r}; one of {sorted(actions)}")
                await actions[action](node)
            except (ValueError, AttributeError, TimeoutError) as e:
                return json.dumps({"ok": False, "error": str(e)}).encode()
            return json.dumps({"ok": True}).encode()
        return handle

    async def stop(self) -> None:
        monitor = self._running.pop("monitor", None)
        if monitor is not None:
            await monitor.aclose()
        for node in list(self.agents):
            await self._stop_agent(node)
        for sim in self.sims.values():
            await sim.stop()
        for bus in self.node_buses.values():
            await bus.close()
        if self._log is not None:
            self._log.close()
        if self._own_sockets:
            shutil.rmtree(self.sockets, ignore_errors=True)


async def run_nodes(spec: NodesSpec) -> None:
    """Serve until SIGTERM/SIGINT or until a node dies; a signal while the nodes start stops them too
    (the parent kills a child that ignores SIGTERM, and a killed one leaves its scratch dir behind)."""
    try:
        ensure_descriptors(spec.nodes, hosts=spec.part != "agents", agents=spec.part != "hosts",
                           node_identity=spec.node_identity)
    except DescriptorLimitError as e:
        raise SystemExit(f"cannot start: {e}") from None
    stop = asyncio.Event()
    stop_on_signals(stop)
    name = "sim-nodes" if spec.part == "all" else f"sim-{spec.part}"
    bus = await Bus.connect(BusSettings(url=spec.nats_url, name=f"gpubus-{name}", reconnect_wait_s=0.25,
                                       replicas=spec.nats_replicas),
                            source=name)
    kube = await SimKubeClient.from_kubeconfig(spec.kubeconfig)
    cluster = SimCluster(spec, bus, kube)
    try:
        await bus.ensure_schema()
        if not await _unless_stopped(cluster.start(), stop):
            log.info("stopped while starting")
            return
        write_ready(spec.ready_file, nodes=cluster.names,
                    metrics_port=cluster.monitor.metrics_port if cluster.monitor else 0)
        log.info("%d simulated nodes up (%s each; %s)", len(cluster.names), spec.devices, spec.part)
        stopping = asyncio.create_task(stop.wait(), name="nodes-stop")
        dying = asyncio.create_task(cluster.fatal.wait(), name="nodes-fatal")
        await asyncio.wait([stopping, dying], return_when=asyncio.FIRST_COMPLETED)
        for task in (stopping, dying):
            task.cancel()
    finally:
        await cluster.stop()
        await kube.close()
        await bus.close()
    if cluster.fatal.is_set():
        raise SystemExit("simulated nodes stopped: a node died (see the log above)")


async def _unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``work``; if ``stop`` is set first, cancel it and return False."""
    working = asyncio.create_task(work, name="nodes-start")
    stopping = asyncio.create_task(stop.wait(), name="nodes-stop-while-starting")
    try:
        await asyncio.wait([working, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if working.done():
        working.result()
        return True
    working.cancel()
    await asyncio.gather(working, return_exceptions=True)
    return False
