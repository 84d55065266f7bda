"""The ``gpubus up`` stack: an embedded NATS and the child processes of a whole simulated cluster.

Owns the process tree: starts (in order) NATS, the API server stand-in, then together the
kube-scheduler stand-in, the webhook, the scheduler, and one process running every simulated
node (node-agents, kubelet stand-ins, monitor); waits for each to be ready; reports where
everything is; stops everything in reverse order; and notices a child that dies. The same code
backs ``gpubus up`` and the end-to-end tests (which also use :meth:`Stack.restart`/:meth:`kill`).

Every child is ``python -m gpubus <command> ...``; this module knows their flags and readiness
endpoints, never their internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from gpubus.up_dir import forget_nats_url, write_nats_url
from gpubus_local.natscluster import EmbeddedCluster
from gpubus_local.natsserver import (
    DEFAULT_PORT,
    EmbeddedNats,
    environ_with_defaults,
    free_port,
    port_is_free,
)
from gpubus_local.stack_datadir import SUBDIRS, DataDirLock, make_dirs
from gpubus_local.stack_identity import (
    AUDIENCE,
    CALLOUT_USER,
    NAMESPACE,
    SERVICE_ACCOUNT,
    CalloutFiles,
    write_callout_files,
)
from gpubus_local.stack_scratch import hosts_dir, pod_log_dir
from gpubus_local.stack_tls import WebhookTLS, ensure_webhook_tls

log = logging.getLogger(__name__)

SCHEDULER_NAME = "gpubus-scheduler"
#: Offsets from ``--port-base``: API server, webhook, extender, monitor /metrics, dashboard.
_OFFSETS = {"apiserver": 0, "webhook": 1, "scheduler": 2, "monitor": 3, "dashboard": 4}
DEFAULT_PORT_BASE = 17000
MAX_PORT = 65535
MAX_PORT_BASE = MAX_PORT - max(_OFFSETS.values())
"""The highest ``--port-base`` whose every offset is still a port."""


class StackError(RuntimeError):
    """The stack could not start, or a part of it died."""


def default_replicas(spec: StackSpec) -> int:
    """What ``--nats-replicas`` defaults to: 3 on an embedded cluster of 3+ servers, else 1."""
    if spec.nats_replicas is not None:
        return spec.nats_replicas
    return 3 if spec.nats_cluster >= 3 and not spec.nats_url else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSpec:
    """What ``gpubus up`` brings up."""

    data_dir: Path
    nodes: int = 4
    devices: str = "4xA100-80GB"
    """Simulated GPUs per node (node-agent ``--simulate`` syntax)."""
    nats_url: str | None = None
    """Use this NATS instead of starting one."""
    nats_port: int = DEFAULT_PORT
    """Port of the embedded NATS (0 = any free port); a cluster's servers listen on it and the next ones."""
    nats_cluster: int = 1
    """Embedded NATS servers: 1, or a JetStream cluster of this many over loopback routes (3 for HA)."""
    nats_replicas: int | None = None
    """Copies of the event stream and buckets (``BusSettings.replicas``); None = 3 on an embedded
    cluster of 3 or more servers, else 1."""
    port_base: int = DEFAULT_PORT_BASE
    """API server = base, webhook = base+1, extender = base+2, monitor = base+3, dashboard = base+4;
    0 = free ports."""
    split_count: int = 10
    pod_duration: str = "60s"
    """How long a simulated pod runs without the ``gpubus.io/sim-duration`` annotation."""
    node_prefix: str = "node"
    log_level: str = "info"
    ready_timeout_s: float = 60.0
    fresh: bool = False
    """Forget the event history and KV state of an earlier run (the embedded NATS store)."""
    single_node_filter: bool = False
    """HAMi mode: the extender's filter answers only the best node, so kube-scheduler skips /prioritize."""
    nats_args: tuple[str, ...] = ()
    """Extra flags for the embedded nats-server (``bench/e2e.py``: its monitoring port, to count messages)."""
    agents_apart: bool = False
    """Run the node-agents in a process of their own (``agents``) beside the kubelets' (``nodes``),
    so their CPU is measured apart (``bench/e2e.py``); the nodes then answer no control requests."""
    python: str = sys.executable
    node_identity: bool = True
    """Node-agents connect to NATS as their own node (auth callout, ``gpubus authn``); embedded NATS only."""
    extra_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Extra command-line flags per child (``control``, ``kube-scheduler``, ``webhook``, ``scheduler``,
    ``nodes``, ``agents``, ``dashboard``)."""


NODES_ENV: Mapping[str, str] = {"GRPC_EXPERIMENTS": "-event_engine_client,-event_engine_listener"}
"""Defaults for the simulated-nodes process (the caller's environment wins).

That process makes every kubelet and device-plugin gRPC call of the cluster, client and server in
one interpreter. gRPC's EventEngine client and listener hand each call's events between their own
threads and the asyncio loop; with both turned off (gRPC's documented ``GRPC_EXPERIMENTS`` switch,
read once at start) a unary call costs ~400 instead of ~500 us of CPU, and the process switches
context a third as often (bench/e2e.py: 12.8k -> 4.3k/s, CPU per pod 3.4 -> 3.0 ms). The services
themselves keep gRPC's defaults: a real node-agent answers a handful of calls a minute."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    apiserver: int
    webhook: int
    scheduler: int
    monitor: int
    dashboard: int

    @classmethod
    def choose(cls, base: int) -> Ports:
        if base == 0:  # free_port does not hand out its latest picks again: they are distinct
            return cls(**{name: free_port() for name in _OFFSETS})
        ports = cls(**{name: base + off for name, off in _OFFSETS.items()})
        busy = [f"{name} {base + off}" for name, off in _OFFSETS.items() if not port_is_free(base + off)]
        if busy:
            raise StackError(f"port(s) busy: {', '.join(busy)} — is another `gpubus up` running? "
                             f"Stop it or choose other ports with --port-base")
        return ports


Probe = Callable[[], Awaitable[bool]]


class Child:
    """One child process: started with its log file, probed until ready, stopped with SIGTERM."""

    def __init__(self, name: str, argv: list[str], log_path: Path, probe: Probe,
                 ready_file: Path | None = None, *, env: Mapping[str, str] | None = None) -> None:
        self.name, self.argv, self.log_path, self.probe = name, argv, log_path, probe
        self.ready_file = ready_file
        self.env_defaults = dict(env or {})
        """Environment the child gets unless this process's own environment sets the same names."""
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        if self.ready_file is not None:
            self.ready_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                env={**environ_with_defaults(self.env_defaults), "PYTHONUNBUFFERED": "1"},
                start_new_session=True)
        self.starts += 1

    async def wait_ready(self, timeout: float) -> None:  # noqa: ASYNC109
        """Probe until ready; StackError with the log's tail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise StackError(f"{self.name} exited with code {self.exit_code} while starting\n"
                                 f"{self.log_tail()}")
            with contextlib.suppress(Exception):
                if await self.probe():
                    return
            await asyncio.sleep(0.05)  # a readiness probe's interval, not a wait for an outcome
        raise StackError(f"{self.name} not ready after {timeout:.0f}s\n{self.log_tail()}")

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def wait_exit(self) -> int:
        assert self.proc is not None
        return await self.proc.wait()

    async def stop(self, timeout: float = 15.0) -> None:  # noqa: ASYNC109
        """SIGTERM, then SIGKILL after ``timeout``."""
        if not self.running:
            return
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            log.warning("%s did not stop within %.0fs; killing it", self.name, timeout)
            await self.kill()

    async def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(f"  {self.name}| {line}" for line in text[-lines:])


def _http_probe(url: str, ssl_ctx: ssl.SSLContext | bool = True) -> Probe:
    async def probe() -> bool:
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url, ssl=ssl_ctx) as r:
            return r.status == 200
    return probe


def _file_probe(path: Path) -> Probe:
    async def probe() -> bool:
        return os.path.exists(path)  # noqa: ASYNC240 - one stat, cheaper than a thread hop
    return probe


class Stack:
    """A running simulated cluster. ``await start()``; ``await stop()``; see :meth:`endpoints`."""

    def __init__(self, spec: StackSpec) -> None:
        self.spec = spec
        self.data_dir = spec.data_dir.resolve()
        self.nats: EmbeddedNats | EmbeddedCluster | None = None
        self.children: dict[str, Child] = {}
        self.ports: Ports | None = None
        self.tls: WebhookTLS | None = None
        self.lock = DataDirLock(self.data_dir)
        self._nats_starting: asyncio.Task[None] | None = None
        """The thread starting NATS: cancelling ``start`` cannot stop it, so ``stop`` waits for it."""
        self._pod_logs_made = False
        """This stack made (so owns) ``pod_logs``; a stack refused the data dir must not remove them."""
        self.callout: CalloutFiles | None = None
        """Per-node identity's keys and NATS config (``spec.node_identity`` with the embedded NATS)."""
        self._url_recorded = False
        """This stack recorded its NATS URL in the data dir (``gpubus tap`` reads it), so removes it."""

    # -- paths -----------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def admissions_log(self) -> Path:
        """JSON lines: what each simulated kubelet got from Allocate (for checks)."""
        return self.data_dir / "admissions.jsonl"

    @property
    def pod_logs(self) -> Path:
        """The simulated kubelets' container logs (a node's ``/var/log/pods``), read by ``kubectl logs``:
        in memory (``pod_log_dir``), made empty at start and removed at stop, as the pods are."""
        return pod_log_dir(self.data_dir)

    @property
    def nats_url(self) -> str:
        if self.spec.nats_url:
            return self.spec.nats_url
        assert self.nats is not None
        return self.nats.url

    @property
    def nats_cluster(self) -> EmbeddedCluster:
        """The embedded cluster (``nats_cluster`` > 1), to kill and revive its servers in fault tests."""
        assert isinstance(self.nats, EmbeddedCluster), "the stack runs no embedded NATS cluster"
        return self.nats

    def node_names(self) -> list[str]:
        return [f"{self.spec.node_prefix}-{i}" for i in range(1, self.spec.nodes + 1)]

    def endpoints(self) -> dict[str, str]:
        assert self.ports is not None
        p = self.ports
        return {
            "NATS": self.nats_url + (
                f"  (cluster of {self.spec.nats_cluster}, R{default_replicas(self.spec)})"
                if isinstance(self.nats, EmbeddedCluster) else ""),
            "kubeconfig": str(self.kubeconfig),
            "API server": f"http://127.0.0.1:{p.apiserver}",
            "webhook": f"https://127.0.0.1:{p.webhook}/mutate  (/metrics)",
            "extender": f"http://127.0.0.1:{p.scheduler}  " + (
                "(/filter /bind /metrics; HAMi single-node filter)" if self.spec.single_node_filter
                else "(/filter /prioritize /bind /metrics)"),
            "monitor metrics": f"http://127.0.0.1:{p.monitor}/metrics",
            "dashboard": f"http://127.0.0.1:{p.dashboard}/",
            "logs": str(self.data_dir / "logs"),
            "pod logs": f"{self.pod_logs}  (kubectl logs)",
        }

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Lock the data dir, then NATS, the API server, then the other children together.

        On failure or cancellation stop what started (DataDirError/DataDirBusy if the data dir is
        unusable or another stack holds it)."""
        make_dirs(self.data_dir)
        self.lock.acquire()
        try:
            self.ports = Ports.choose(self.spec.port_base)
            if self.spec.fresh:
                shutil.rmtree(self.data_dir / "nats", ignore_errors=True)
            make_dirs(self.data_dir, SUBDIRS)
            self.admissions_log.unlink(missing_ok=True)
            # sim-control (started first, ready before the nodes) empties the pod logs of an earlier run
            self._pod_logs_made = True
            if self.spec.agents_apart:  # what a killed stack on this data dir left
                shutil.rmtree(hosts_dir(self.data_dir), ignore_errors=True)
            self.tls = ensure_webhook_tls(self.data_dir / "tls")
            if not self.spec.nats_url:
                extra: tuple[str, ...] = self.spec.nats_args
                if self.spec.node_identity:  # every server of a cluster reads the callout's config
                    self.callout = write_callout_files(self.data_dir / "run" / "authn")
                    extra = (*extra, "-c", str(self.callout.nats_conf))
                self.nats = (EmbeddedCluster(self.data_dir / "nats", size=self.spec.nats_cluster,
                                             port=self.spec.nats_port, extra_args=extra)
                             if self.spec.nats_cluster > 1 else
                             EmbeddedNats(self.data_dir / "nats", port=self.spec.nats_port, extra_args=extra))
                self._nats_starting = asyncio.create_task(asyncio.to_thread(self.nats.start),
                                                          name="nats-start")
                await asyncio.shield(self._nats_starting)
            write_nats_url(self.data_dir, self.nats_url)
            self._url_recorded = True
            self.children = self._build_children()
            first, *rest = self.children.values()
            await self._start_ready(first)
            # The others need only NATS and the API server: start them together, both cores busy.
            await asyncio.gather(*(self._start_ready(child) for child in rest))
        except BaseException:
            await self.stop()
            raise

    async def _start_ready(self, child: Child) -> None:
        await child.start()
        await child.wait_ready(self.spec.ready_timeout_s)
        log.info("%s ready (pid %s)", child.name, child.pid)

    async def stop(self) -> None:
        """Children in reverse order, then NATS (once a start in progress is done), then the data dir lock."""
        for child in reversed(list(self.children.values())):
            await child.stop()
        starting = self._nats_starting
        if starting is not None:
            await asyncio.wait([starting])  # a thread cannot be interrupted: let it finish, then undo it
            if not starting.cancelled():
                starting.exception()  # start() raised its failure to whoever still awaited it
            self._nats_starting = None
        if self._url_recorded:
            forget_nats_url(self.data_dir)
            self._url_recorded = False
        if self.nats is not None:
            await asyncio.to_thread(self.nats.stop)
        if self._pod_logs_made:
            shutil.rmtree(self.pod_logs, ignore_errors=True)
            if self.spec.agents_apart:
                shutil.rmtree(hosts_dir(self.data_dir), ignore_errors=True)
            self._pod_logs_made = False
        self.lock.release()

    async def watch(self) -> tuple[str, int]:
        """Return (name, exit code) of the first child (or NATS) that dies."""
        waits = {asyncio.create_task(c.wait_exit(), name=f"wait-{n}"): n for n, c in self.children.items()}
        if self.nats is not None:
            waits[asyncio.create_task(self._nats_exit(), name="wait-nats")] = "nats-server"
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        task = done.pop()
        return waits[task], task.result()

    async def _nats_exit(self) -> int:
        while True:
            assert self.nats is not None
            code = self.nats.exit_code()
            if code is not None:
                return code
            await asyncio.sleep(0.5)  # no child-exit notification for a Popen; a liveness probe

    # -- faults (tests) ----------------------------------------------------------------------
    async def kill(self, name: str) -> None:
        await self.children[name].kill()

    async def restart(self, name: str, *, kill: bool = False) -> None:
        """Stop (or SIGKILL) one child and start it again, waiting until it is ready."""
        child = self.children[name]
        await (child.kill() if kill else child.stop())
        await child.start()
        await child.wait_ready(self.spec.ready_timeout_s)

    async def restart_nats(self) -> None:
        """Restart the embedded NATS (a cluster: one server after another)."""
        assert self.nats is not None, "restart_nats needs the embedded NATS"
        await asyncio.to_thread(self.nats.restart)

    # -- children ----------------------------------------------------------------------------
    def _gpubus(self, *args: str) -> list[str]:
        return [self.spec.python, "-m", "gpubus", *args]

    def _build_children(self) -> dict[str, Child]:
        assert self.ports is not None and self.tls is not None
        p, s, run, logs = self.ports, self.spec, self.data_dir / "run", self.data_dir / "logs"
        nats = self.nats_url
        # Only when not the default: the default stack's command lines stay those of docker-compose.yml.
        replicas = ("--nats-replicas", str(default_replicas(s))) if default_replicas(s) != 1 else ()
        extra = s.extra_args
        ca_ctx = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        control = Child("control", self._gpubus(
            "sim-control", "--port", str(p.apiserver), "--kubeconfig", str(self.kubeconfig),
            "--webhook-url", f"https://127.0.0.1:{p.webhook}/mutate", "--webhook-ca", str(self.tls.ca_cert),
            "--pod-log-dir", str(self.pod_logs), "--ready-file", str(run / "control.ready"),
            "--log-level", s.log_level, *extra.get("control", ())),
            logs / "control.log", _file_probe(run / "control.ready"), run / "control.ready")
        kube_scheduler = Child("kube-scheduler", self._gpubus(
            "sim-kube-scheduler", "--kubeconfig", str(self.kubeconfig),
            "--extender-url", f"http://127.0.0.1:{p.scheduler}", "--scheduler-name", SCHEDULER_NAME,
            "--ready-file", str(run / "kube-scheduler.ready"), "--log-level", s.log_level,
            *extra.get("kube-scheduler", ())),
            logs / "kube-scheduler.log", _file_probe(run / "kube-scheduler.ready"),
            run / "kube-scheduler.ready")
        webhook = Child("webhook", self._gpubus(
            "webhook", "--bind", "127.0.0.1", "--port", str(p.webhook), "--cert", str(self.tls.cert),
            "--key", str(self.tls.key), "--kubeconfig", str(self.kubeconfig), "--nats", nats, *replicas,
            "--scheduler-name", SCHEDULER_NAME, "--log-level", s.log_level, *extra.get("webhook", ())),
            logs / "webhook.log", _http_probe(f"https://127.0.0.1:{p.webhook}/healthz", ca_ctx))
        scheduler = Child("scheduler", self._gpubus(
            "scheduler", "--bind", "127.0.0.1", "--port", str(p.scheduler),
            "--kubeconfig", str(self.kubeconfig),
            "--nats", nats, *replicas, "--scheduler-name", SCHEDULER_NAME, "--log-level", s.log_level,
            *(("--single-node-filter",) if s.single_node_filter else ()), *extra.get("scheduler", ())),
            logs / "scheduler.log", _http_probe(f"http://127.0.0.1:{p.scheduler}/readyz"))
        nodes_args = ["sim-nodes", "--nodes", str(s.nodes), "--devices", s.devices, "--prefix", s.node_prefix,
                      "--split-count", str(s.split_count), "--kubeconfig", str(self.kubeconfig),
                      "--nats", nats, *replicas, "--log-level", s.log_level]
        apart: list[Child] = []
        if s.agents_apart:
            hosts = str(hosts_dir(self.data_dir))
            nodes_args += ["--hosts-dir", hosts]
            apart.append(Child("agents", self._gpubus(
                *nodes_args, "--part", "agents", "--ready-file", str(run / "agents.ready"),
                *extra.get("agents", ())),
                logs / "agents.log", _file_probe(run / "agents.ready"), run / "agents.ready", env=NODES_ENV))
        nodes = Child("nodes", self._gpubus(
            *nodes_args, *(("--part", "hosts") if s.agents_apart else ()),
            "--pod-duration", s.pod_duration, "--metrics-port", str(p.monitor),
            "--admissions-log", str(self.admissions_log), "--pod-log-dir", str(self.pod_logs),
            "--ready-file", str(run / "nodes.ready"), *extra.get("nodes", ())),
            logs / "nodes.log", _file_probe(run / "nodes.ready"), run / "nodes.ready", env=NODES_ENV)
        dashboard = Child("dashboard", self._gpubus(
            "dashboard", "--bind", "127.0.0.1", "--port", str(p.dashboard), "--nats", nats,
            "--log-level", s.log_level, *extra.get("dashboard", ())),
            logs / "dashboard.log", _http_probe(f"http://127.0.0.1:{p.dashboard}/healthz"))
        children = [control, kube_scheduler, webhook, scheduler, nodes, *apart, dashboard]
        if self.callout is not None:
            (apart[0] if apart else nodes).argv.append("--node-identity")  # the node-agents' process
            children.insert(1, self._authn_child(nats, run, logs))
        return {c.name: c for c in children}

    def _authn_child(self, nats: str, run: Path, logs: Path) -> Child:
        """``gpubus authn``: the auth callout of per-node identity, as the callout user."""
        assert self.callout is not None
        port = free_port()
        return Child("authn", self._gpubus(
            "authn", "--bind", "127.0.0.1", "--port", str(port), "--kubeconfig", str(self.kubeconfig),
            "--nats", nats, "--issuer-seed-file", str(self.callout.issuer_seed), "--audience", AUDIENCE,
            "--service-account", f"{NAMESPACE}:{SERVICE_ACCOUNT}", "--log-level", self.spec.log_level,
            *self.spec.extra_args.get("authn", ())),
            logs / "authn.log", _http_probe(f"http://127.0.0.1:{port}/readyz"),
            env={"GPUBUS_BUS_USER": CALLOUT_USER, "GPUBUS_BUS_PASSWORD": self.callout.callout_password})
