"""``gpubus up --control-plane kubernetes``: gpubus on the real Kubernetes control plane, one machine.

What a platform team does on a cluster, done here with the real binaries (``scripts/kube-build``):
etcd, kube-apiserver, kube-controller-manager and the default kube-scheduler (:mod:`.plane`); the
Helm chart installed by the real ``helm`` (its ServiceAccounts, RBAC, webhook configuration,
kube-scheduler configuration and DaemonSet); each gpubus service as a local process that
authenticates with a token of the chart's ServiceAccount for it, so the chart's RBAC is what it
may do; kube-scheduler run from the chart's own ConfigMap, calling the extender; and per node a
real kubelet on a fake container runtime with a gpubus node-agent registered over the real
device-plugin socket, connecting to NATS with a token bound to the node's DaemonSet pod.

What differs from a cluster: no container runs (the fake runtime records what it was asked to
create), the services are processes rather than the chart's pods (which exist, on the fake
runtime), NATS is the embedded server, and the chart's NATS subchart is left out (it cannot be
fetched offline: the chart is installed from a copy without that dependency).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpubus_local.kube import components as c
from gpubus_local.kube.api import AdminApi, Json, node_ready
from gpubus_local.kube.binaries import Binaries, find_binaries
from gpubus_local.kube.kubeconfigs import write_token_kubeconfig
from gpubus_local.kube.lifecycle import StartStop
from gpubus_local.kube.pki import ADMIN
from gpubus_local.kube.plane import ControlPlane, PlaneSpec, any_https_probe, http_probe, https_probe
from gpubus_local.natsserver import EmbeddedNats, free_port
from gpubus_local.stack import SCHEDULER_NAME, Child, Probe, StackError
from gpubus_local.stack_datadir import SUBDIRS, DataDirLock, make_dirs
from gpubus_local.stack_identity import (
    AUDIENCE,
    CALLOUT_USER,
    CalloutFiles,
    private_file,
    write_callout_files,
)
from gpubus_local.stack_tls import WebhookTLS, ensure_webhook_tls
from services.authn.nkeyjwt import Signer

log = logging.getLogger(__name__)

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpubus"
RELEASE = "gpubus"
NAMESPACE = "gpubus-system"
GPU_LABEL = {"gpu": "on"}
"""The label the chart's DaemonSet selects GPU nodes by (HAMi's)."""


def service_account(component: str) -> str:
    """The chart's ServiceAccount of a component (``gpubus.componentName``)."""
    return f"{RELEASE}-{component}"


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeStackSpec:
    """What ``gpubus up --control-plane kubernetes`` brings up."""

    data_dir: Path
    nodes: int = 2
    devices: str = "4xA100-80GB"
    split_count: int = 10
    node_prefix: str = "node"
    scheduler_replicas: int = 1
    """gpubus scheduler + kube-scheduler pairs, as the chart's scheduler pods hold them."""
    log_level: str = "info"
    nats_port: int = 0
    nats_args: tuple[str, ...] = ()
    """Extra nats-server arguments (e.g. ``-m PORT`` for its monitoring endpoint)."""
    scheduler_args: tuple[str, ...] = ()
    """Extra ``gpubus scheduler`` arguments for every replica (e.g. ``--preemption-hold 300``)."""
    agent_args: tuple[str, ...] = ()
    """Extra ``gpubus node-agent`` arguments for every node (e.g. ``--heartbeat-s 1``)."""
    feature_gates: str = ""
    runtime_config: str = ""
    ready_timeout_s: float = 180.0
    python: str = sys.executable
    chart: Path = CHART
    values: dict[str, Any] = field(default_factory=dict)
    """Extra chart values, merged over the launcher's."""
    binaries: Binaries | None = None
    """None: :func:`find_binaries` (builds them on a cold cache)."""
    mode: str = "extender"
    """The chart's ``mode``: ``extender`` (device plugin + scheduler extender) or ``dra`` (each
    node-agent a DRA kubelet plugin publishing a ResourceSlice; kube-scheduler places claims)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServicePorts:
    webhook: int
    schedulers: tuple[int, ...]
    authn: int
    dashboard: int
    monitor: int

    @classmethod
    def choose(cls, schedulers: int) -> ServicePorts:
        return cls(webhook=free_port(), schedulers=tuple(free_port() for _ in range(schedulers)),
                   authn=free_port(), dashboard=free_port(), monitor=free_port())


def strip_dependencies(chart: Path, into: Path) -> Path:
    """A copy of ``chart`` without its subchart dependencies (not vendored, not fetchable here)."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(chart, into)
    meta = yaml.safe_load((into / "Chart.yaml").read_text())
    meta.pop("dependencies", None)
    (into / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return into


def chart_values(*, nats_url: str, webhook_url: str, ca_pem: str, extender_url: str, host_dir: Path,
                 split_count: int, log_level: str) -> Json:
    """The chart's values for this machine: external NATS, the webhook and extender on loopback,
    host paths under the data dir, and one replica of each Deployment (their pods never run)."""
    return {
        "global": {"nats": {"url": nats_url}, "logJson": False, "logLevel": log_level,
                   "hookPath": str(host_dir / "hook")},
        "nats": {"enabled": False},
        "natsAuth": {"enabled": False},
        "nodeIdentity": {"createIssuerSecret": False, "replicas": 1},
        "webhook": {"url": webhook_url, "caBundle": ca_pem},
        "scheduler": {"extender": {"urlPrefix": extender_url}},
        "nodeAgent": {"pluginDir": str(host_dir / "device-plugins"),
                      "podResourcesDir": str(host_dir / "pod-resources"), "deviceSplitCount": split_count},
    }


def merge(base: Json, over: Json) -> Json:
    out = dict(base)
    for key, value in over.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge(out[key], value) if nested else value
    return out


class KubeStack(StartStop):
    """The whole local world on the real control plane. ``async with KubeStack(spec) as stack``."""

    def __init__(self, spec: KubeStackSpec) -> None:
        self.spec = spec
        self.data_dir = spec.data_dir.resolve()
        self.lock = DataDirLock(self.data_dir)
        self.kube_dir = self.data_dir / "kube"
        self.ports = ServicePorts.choose(spec.scheduler_replicas)
        self.children: dict[str, Child] = {}
        self.nats: EmbeddedNats | None = None
        self.plane: ControlPlane | None = None
        self.api: AdminApi | None = None
        self.tls: WebhookTLS | None = None
        self.callout: CalloutFiles | None = None
        self.binaries: Binaries | None = spec.binaries

    # -- paths and facts ----------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The cluster admin's kubeconfig (``kubectl --kubeconfig``)."""
        return self.data_dir / "kubeconfig"

    @property
    def nats_url(self) -> str:
        assert self.nats is not None
        return self.nats.url

    def node_names(self) -> list[str]:
        return [f"{self.spec.node_prefix}-{i}" for i in range(1, self.spec.nodes + 1)]

    def endpoints(self) -> dict[str, str]:
        assert self.plane is not None
        p = self.ports
        return {
            "NATS": self.nats_url,
            "kubeconfig": str(self.kubeconfig),
            "API server": f"{self.plane.server}  (Kubernetes, real)",
            "webhook": f"https://127.0.0.1:{p.webhook}/webhook  (/metrics)",
            "extender": "  ".join(f"http://127.0.0.1:{port}" for port in p.schedulers),
            "monitor metrics": f"http://127.0.0.1:{p.monitor}/metrics",
            "dashboard": f"http://127.0.0.1:{p.dashboard}/",
            "logs": f"{self.data_dir / 'logs'}  {self.kube_dir / 'logs'}",
        }

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        spec = self.spec
        make_dirs(self.data_dir)
        self.lock.acquire()
        make_dirs(self.data_dir, SUBDIRS)
        if self.binaries is None:
            self.binaries = await asyncio.to_thread(find_binaries)
        binaries = self.binaries
        self.tls = ensure_webhook_tls(self.data_dir / "tls")
        self.callout = write_callout_files(self.data_dir / "run" / "authn")
        self.nats = EmbeddedNats(self.data_dir / "nats", port=spec.nats_port or free_port(),
                                 extra_args=("-c", str(self.callout.nats_conf), *spec.nats_args))
        await asyncio.to_thread(self.nats.start)
        self.plane = ControlPlane(PlaneSpec(
            directory=self.kube_dir, binaries=binaries, feature_gates=spec.feature_gates,
            runtime_config=spec.runtime_config, ready_timeout_s=spec.ready_timeout_s))
        await self.plane.start()
        shutil.copyfile(self.plane.admin_kubeconfig, self.kubeconfig)
        self.api = AdminApi(self.plane.server, self.plane.pki.ca, self.plane.pki.client(ADMIN))
        await self.api.__aenter__()
        await self._install_chart(binaries)
        await self._start_services(binaries)
        await asyncio.gather(*(self._start_node(name) for name in self.node_names()))
        # the API server refuses a pod whose ServiceAccount does not exist yet, and the controller
        # manager makes namespace default's own a moment after it starts (later on a loaded machine):
        # up means a user's first `kubectl create` of a pod is admitted
        await self.api.wait_for("/api/v1/namespaces/default/serviceaccounts/default", lambda _: True,
                                timeout=spec.ready_timeout_s, what="ServiceAccount default/default")

    async def stop(self) -> None:
        for child in reversed(list(self.children.values())):
            await child.stop()
        if self.plane is not None:
            await self.plane.stop()
        if self.api is not None:
            await self.api.__aexit__(None, None, None)
            self.api = None
        if self.nats is not None:
            await asyncio.to_thread(self.nats.stop)
        self.lock.release()

    async def watch(self) -> tuple[str, int]:
        """(name, exit code) of the first child that dies, control plane included."""
        assert self.plane is not None
        everyone = {**self.plane.children, **self.children}
        for node in self.plane.nodes.values():
            everyone[node.runtime.name], everyone[node.kubelet.name] = node.runtime, node.kubelet
        waits = {asyncio.create_task(child.wait_exit(), name=f"wait-{name}"): name
                 for name, child in everyone.items()}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        task = done.pop()
        return waits[task], task.result()

    # -- the chart ------------------------------------------------------------------------------
    async def _install_chart(self, binaries: Binaries) -> None:
        assert self.plane is not None and self.tls is not None
        host = self.kube_dir / "host"
        dra = {"registryDir": str(host / "plugins_registry"),
               "pluginDir": str(host / "plugins" / "gpubus.io"), "cdiDir": str(host / "cdi")}
        values = merge(merge(chart_values(
            nats_url=self.nats_url, webhook_url=f"https://127.0.0.1:{self.ports.webhook}/webhook",
            ca_pem=self.tls.ca_pem().decode(), extender_url=f"http://127.0.0.1:{self.ports.schedulers[0]}",
            host_dir=host, split_count=self.spec.split_count,
            log_level=self.spec.log_level), {"mode": self.spec.mode, "dra": dra}), self.spec.values)
        values_file = private_file(self.kube_dir / "values.yaml", yaml.safe_dump(values, sort_keys=False))
        chart = strip_dependencies(self.spec.chart, self.kube_dir / "chart")
        for path in (host / "device-plugins", host / "pod-resources", host / "hook" / "vgpu",
                     *(Path(d) for d in dra.values())):
            path.mkdir(parents=True, exist_ok=True)  # the DaemonSet's hostPath volumes (type Directory)
        argv = [str(binaries["helm"]), "upgrade", "--install", RELEASE, str(chart), "--namespace", NAMESPACE,
                "--create-namespace", "--kubeconfig", str(self.kubeconfig), "--values", str(values_file)]
        log_path = self.data_dir / "logs" / "helm.log"
        with log_path.open("ab") as out:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                                                        stderr=asyncio.subprocess.STDOUT)
            code = await proc.wait()
        if code != 0:
            raise StackError(f"helm install failed (exit {code}); see {log_path}:\n"
                             + "\n".join(log_path.read_text(errors="replace").splitlines()[-15:]))
        log.info("chart installed as %s/%s", NAMESPACE, RELEASE)
        await self._issuer_secret()

    async def _issuer_secret(self) -> None:
        """The callout's issuer key as the Secret the chart's authn pod mounts (the chart's
        pre-install Job would make it, but no container runs here to do so)."""
        assert self.api is not None and self.callout is not None
        seed = self.callout.issuer_seed.read_text().strip()
        public = Signer.from_seed(seed).public_key
        data = {"issuer.seed": seed, "issuer.pub": public}
        await self.api.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gpubus-nats-callout"},
            "type": "Opaque", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})

    async def service_kubeconfig(self, component: str, *, pod: Json | None = None) -> Path:
        """A kubeconfig holding a token of the chart's ServiceAccount for ``component``."""
        assert self.api is not None and self.plane is not None
        token = await self.api.token(NAMESPACE, service_account(component), pod=pod)
        suffix = f"-{pod['spec']['nodeName']}" if pod is not None else ""
        return write_token_kubeconfig(self.kube_dir / "kubeconfigs" / f"sa-{component}{suffix}.yaml",
                                      self.plane.server, self.plane.ca, token)

    # -- gpubus's services ------------------------------------------------------------------------
    def _gpubus(self, *args: str) -> list[str]:
        return [self.spec.python, "-m", "gpubus", *args, "--log-level", self.spec.log_level]

    def _child(self, name: str, argv: list[str], probe: Probe, env: dict[str, str] | None = None) -> Child:
        child = Child(name, argv, self.data_dir / "logs" / f"{name}.log", probe, env=env)
        self.children[name] = child
        return child

    async def _start(self, *children: Child) -> None:
        async def one(child: Child) -> None:
            await child.start()
            await child.wait_ready(self.spec.ready_timeout_s)
            log.info("%s ready (pid %s)", child.name, child.pid)
        await asyncio.gather(*(one(child) for child in children))

    async def _start_services(self, binaries: Binaries) -> None:
        assert self.tls is not None and self.callout is not None and self.plane is not None
        p, nats = self.ports, self.nats_url
        ca_probe = https_probe(f"https://127.0.0.1:{p.webhook}/healthz", self.tls.ca_cert)
        authn = self._child("authn", self._gpubus(
            "authn", "--bind", "127.0.0.1", "--port", str(p.authn),
            "--kubeconfig", str(await self.service_kubeconfig("authn")), "--nats", nats,
            "--issuer-seed-file", str(self.callout.issuer_seed), "--audience", AUDIENCE,
            "--service-account", f"{NAMESPACE}:{service_account('node')}"),
            http_probe(f"http://127.0.0.1:{p.authn}/readyz"),
            env={"GPUBUS_BUS_USER": CALLOUT_USER, "GPUBUS_BUS_PASSWORD": self.callout.callout_password})
        webhook = self._child("webhook", self._gpubus(
            "webhook", "--bind", "127.0.0.1", "--port", str(p.webhook), "--cert", str(self.tls.cert),
            "--key", str(self.tls.key), "--kubeconfig", str(await self.service_kubeconfig("webhook")),
            "--nats", nats, "--scheduler-name", SCHEDULER_NAME, *self._webhook_mode()), ca_probe)
        scheduler_kubeconfig = await self.service_kubeconfig("scheduler")
        schedulers = [self._child(self._scheduler_name(i), self._gpubus(
            "scheduler", "--bind", "127.0.0.1", "--port", str(port),
            "--kubeconfig", str(scheduler_kubeconfig), "--nats", nats, "--scheduler-name", SCHEDULER_NAME,
            "--replica-id", f"local-{i}", *self._dra_driver(), *self.spec.scheduler_args),
            http_probe(f"http://127.0.0.1:{port}/readyz")) for i, port in enumerate(p.schedulers)]
        dashboard = self._child("dashboard", self._gpubus(
            "dashboard", "--bind", "127.0.0.1", "--port", str(p.dashboard), "--nats", nats),
            http_probe(f"http://127.0.0.1:{p.dashboard}/healthz"))
        await self._start(authn, webhook, *schedulers, dashboard)
        await self._start(*[await self._kube_scheduler(i, binaries, scheduler_kubeconfig)
                            for i in range(len(p.schedulers))])
        monitor = self._child("monitor", self._gpubus(
            "monitor", *[arg for n in self.node_names() for arg in ("--node", n)], "--source", "sim",
            "--metrics-bind", "127.0.0.1", "--port", str(p.monitor), "--nats", nats),
            http_probe(f"http://127.0.0.1:{p.monitor}/metrics"))
        await self._start(monitor)

    def _dra_driver(self) -> list[str]:
        """DRA mode: the scheduler's leader follows claims, as the chart's scheduler Deployment runs it."""
        return ["--dra-driver", "gpubus.io"] if self.spec.mode == "dra" else []

    def _webhook_mode(self) -> list[str]:
        """DRA mode: the webhook turns GPU limits into claims, as the chart's webhook Deployment runs it."""
        if self.spec.mode != "dra":
            return []
        return ["--mode", "dra", "--dra-device-class", "gpubus.io", "--dra-driver", "gpubus.io"]

    @staticmethod
    def _scheduler_name(i: int) -> str:
        return "scheduler" if i == 0 else f"scheduler-{i + 1}"

    async def _kube_scheduler(self, i: int, binaries: Binaries, kubeconfig: Path) -> Child:
        """kube-scheduler as the chart's scheduler pod runs it: the chart's ConfigMap, read back from
        the API server, with this machine's kubeconfig and its own pair's extender address."""
        assert self.api is not None
        name = service_account("scheduler")
        configmap = await self.api.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}")
        if configmap is None:
            raise StackError("the chart made no kube-scheduler ConfigMap (scheduler.enabled=false?)")
        port = free_port()
        config = self.kube_dir / f"gpubus-kube-scheduler-{i + 1}.yaml"
        config.write_text(c.kube_scheduler_config(
            configmap["data"]["config.yaml"], kubeconfig=kubeconfig,
            extender_url=f"http://127.0.0.1:{self.ports.schedulers[i]}"))
        child = "kube-scheduler-gpubus" + (f"-{i + 1}" if i else "")
        argv = c.kube_scheduler_argv(binaries["kube-scheduler"], config, kubeconfig, port,
                                     feature_gates=self.spec.feature_gates)
        return self._child(child, argv, any_https_probe(port))

    # -- nodes ------------------------------------------------------------------------------------
    async def _start_node(self, name: str) -> None:
        """The node's kubelet (registered and Ready), its DaemonSet pod, then its node-agent with
        that pod's tokens: one for the API server, one for NATS (audience ``gpubus-nats``)."""
        assert self.plane is not None and self.api is not None
        node = await self.plane.add_node(name, labels=GPU_LABEL)
        await self.api.wait_for(f"/api/v1/nodes/{name}", node_ready, timeout=self.spec.ready_timeout_s,
                                what=f"node {name} Ready")
        pod = await self.node_pod(name)
        kubeconfig = await self.service_kubeconfig("node", pod=pod)
        token = await self.api.token(NAMESPACE, service_account("node"), audiences=[AUDIENCE], pod=pod)
        (self.kube_dir / "tokens").mkdir(parents=True, exist_ok=True)
        token_file = private_file(self.kube_dir / "tokens" / f"{name}.token", token)
        dra = [] if self.spec.mode == "extender" else [
            "--mode", self.spec.mode, "--dra-registry-dir", str(node.paths.root / "plugins_registry"),
            "--dra-plugin-dir", str(self.dra_plugin_dir(name)), "--cdi-dir", str(self.cdi_dir(name))]
        agent = self._child(f"node-agent-{name}", self._gpubus(
            "node-agent", "--node-name", name, "--simulate", self.spec.devices,
            "--device-split-count", str(self.spec.split_count),
            "--plugin-dir", str(node.paths.device_plugins),
            "--pod-resources-socket", str(node.paths.pod_resources),
            "--hook-path", str(self.kube_dir / "hook"),
            "--metrics-port", "0", "--kubeconfig", str(kubeconfig), "--nats", self.nats_url, *dra,
            *self.spec.agent_args),
            self._advertises(name) if self.spec.mode == "extender" else self._publishes(name),
            env={"GPUBUS_BUS_TOKEN_FILE": str(token_file), "GPUBUS_BUS_NODE": name})
        await self._start(agent)

    def dra_plugin_dir(self, node: str) -> Path:
        """DRA mode: ``node``'s DRA socket and prepared-claim state (``<kubelet root>/plugins/gpubus.io``)."""
        assert self.plane is not None
        return self.plane.nodes[node].paths.root / "plugins" / "gpubus.io"

    def cdi_dir(self, node: str) -> Path:
        """DRA mode: where ``node``'s node-agent writes prepared claims' CDI specs."""
        assert self.plane is not None
        return self.plane.nodes[node].paths.root / "cdi"

    def _publishes(self, node: str) -> Probe:
        """DRA mode: ready once the node-agent's ResourceSlice is on the API server."""
        async def probe() -> bool:
            assert self.api is not None
            name = f"{node}-gpubus-io"
            return await self.api.get(f"/apis/resource.k8s.io/v1/resourceslices/{name}") is not None
        return probe

    async def node_pod(self, node: str) -> Json:
        """The chart's DaemonSet pod on ``node``, once the API server has it."""
        assert self.api is not None
        owner = service_account("node")

        def found(pods: Json) -> bool:
            return any(_owned_by(p, owner) for p in pods.get("items", []))
        pods = await self.api.wait_for(
            f"/api/v1/namespaces/{NAMESPACE}/pods?fieldSelector=spec.nodeName%3D{node}", found,
            timeout=self.spec.ready_timeout_s, what=f"the {owner} DaemonSet pod on {node}")
        return next(p for p in pods["items"] if _owned_by(p, owner))

    def _advertises(self, node: str) -> Probe:
        """Ready once the kubelet reports the node-agent's devices in the Node's allocatable."""
        async def probe() -> bool:
            assert self.api is not None
            found = await self.api.get(f"/api/v1/nodes/{node}")
            count = (found or {}).get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", "0")
            return int(count) > 0
        return probe


def _owned_by(pod: Json, daemonset: str) -> bool:
    return any(ref.get("kind") == "DaemonSet" and ref.get("name") == daemonset
               for ref in pod.get("metadata", {}).get("ownerReferences", []))
