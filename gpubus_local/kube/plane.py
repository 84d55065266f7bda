"""The real Kubernetes control plane on one machine: etcd, kube-apiserver, kube-controller-manager,
and kubelets on a fake container runtime, each a child process with its own log.

An async context manager: entering starts (and waits for) etcd, the API server and the controller
manager; :meth:`add_node` starts one node's fake CRI runtime and kubelet, which registers its Node.
Leaving stops everything in reverse order. kube-scheduler is not here: it is configured from the
Helm chart, so the stack that installs the chart starts it (:mod:`gpubus_local.kube.stack`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from gpubus_local.kube import components as c
from gpubus_local.kube.binaries import Binaries
from gpubus_local.kube.kubeconfigs import write_cert_kubeconfig
from gpubus_local.kube.lifecycle import StartStop
from gpubus_local.kube.pki import (
    ADMIN,
    APISERVER_KUBELET_CLIENT,
    CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    ClusterPKI,
    Identity,
    kubelet_identity,
)
from gpubus_local.natsserver import free_port
from gpubus_local.stack import Child, Probe

log = logging.getLogger(__name__)

MAX_SOCKET_PATH = 100
"""Longest unix socket path we let a kubelet make (the kernel's limit is 107 bytes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaneSpec:
    directory: Path
    """Everything of the control plane: pki/, etcd/, kubelets/, logs/, kubeconfigs/."""
    binaries: Binaries
    feature_gates: str = ""
    """``--feature-gates`` of every component (e.g. ``GenericWorkload=true``)."""
    runtime_config: str = ""
    """The API server's ``--runtime-config`` (API groups off by default, e.g. beta ones)."""
    ready_timeout_s: float = 120.0


def https_probe(url: str, ca: Path, client: tuple[Path, Path] | None = None) -> Probe:
    """GET ``url`` over TLS trusting ``ca``; ready on 200."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client[0]), str(client[1]))

    async def probe() -> bool:
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url, ssl=ctx) as r:
            return r.status == 200
    return probe


def http_probe(url: str) -> Probe:
    async def probe() -> bool:
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as r:
            return r.status == 200
    return probe


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeletNode:
    """One node: its paths and its two processes (the fake runtime, the kubelet)."""

    name: str
    paths: c.KubeletPaths
    runtime: Child
    kubelet: Child


class ControlPlane(StartStop):
    """etcd, the API server and the controller manager; kubelets added with :meth:`add_node`."""

    def __init__(self, spec: PlaneSpec) -> None:
        self.spec = spec
        self.directory = spec.directory.resolve()
        self.logs = self.directory / "logs"
        self.pki = ClusterPKI(self.directory / "pki")
        self.ports = c.Ports(etcd_client=free_port(), etcd_peer=free_port(), apiserver=free_port(),
                             controller_manager=free_port(), kube_scheduler=free_port())
        self.server = f"https://127.0.0.1:{self.ports.apiserver}"
        self.children: dict[str, Child] = {}
        self.nodes: dict[str, KubeletNode] = {}
        self.kubelets = self.directory / "kubelets"
        """The kubelets' root dirs. A kubelet serves unix sockets under its root (the longest:
        ``pod-resources/<10 digits>``, made before it binds), and a socket path must stay under
        108 bytes: under a long data dir the roots go to a short scratch dir, removed at stop."""
        self._scratch: Path | None = None
        if len(str(self.kubelets / "node-00000" / "pod-resources" / "0123456789")) > MAX_SOCKET_PATH:
            self._scratch = Path(tempfile.mkdtemp(prefix="gpubus-kubelets-"))
            self.kubelets = self._scratch

    @property
    def ca(self) -> Path:
        return self.pki.ca.cert

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig_for(ADMIN)

    def kubeconfig_for(self, identity: Identity) -> Path:
        """A kubeconfig that authenticates as ``identity`` with a client certificate."""
        name = identity.user.replace(":", "-")
        return write_cert_kubeconfig(self.directory / "kubeconfigs" / f"{name}.yaml", self.server, self.ca,
                                     self.pki.client(identity))

    async def start(self) -> None:
        b, p, d = self.spec.binaries, self.ports, self.directory
        etcd = self._child("etcd", c.etcd_argv(b["etcd"], d / "etcd", p),
                           http_probe(f"http://127.0.0.1:{p.etcd_client}/health"))
        await self._start(etcd)
        files = c.ApiServerFiles(ca=self.pki.ca, serving=self.pki.apiserver(),
                                 service_account=self.pki.service_account_key(),
                                 kubelet_client=self.pki.client(APISERVER_KUBELET_CLIENT))
        apiserver = self._child("kube-apiserver", c.apiserver_argv(
            b["kube-apiserver"], files, p, feature_gates=self.spec.feature_gates,
            runtime_config=self.spec.runtime_config), https_probe(f"{self.server}/readyz", self.ca))
        await self._start(apiserver)
        manager = self._child("kube-controller-manager", c.controller_manager_argv(
            b["kube-controller-manager"], self.kubeconfig_for(CONTROLLER_MANAGER), self.pki.ca,
            files.service_account, p, feature_gates=self.spec.feature_gates),
            any_https_probe(p.controller_manager))
        await self._start(manager)
        await self._start(self._default_scheduler())

    def _default_scheduler(self) -> Child:
        """kube-scheduler for ``default-scheduler`` pods (DaemonSets, the chart's own workloads)."""
        kubeconfig = self.kubeconfig_for(KUBE_SCHEDULER)
        config = self.directory / "kube-scheduler.yaml"
        config.write_text(c.default_scheduler_config(kubeconfig))
        return self._child("kube-scheduler", c.kube_scheduler_argv(
            self.spec.binaries["kube-scheduler"], config, kubeconfig, self.ports.kube_scheduler,
            feature_gates=self.spec.feature_gates), any_https_probe(self.ports.kube_scheduler))

    def _child(self, name: str, argv: list[str], probe: Probe) -> Child:
        child = Child(name, argv, self.logs / f"{name}.log", probe)
        self.children[name] = child
        return child

    async def _start(self, child: Child) -> None:
        await child.start()
        await child.wait_ready(self.spec.ready_timeout_s)
        log.info("%s ready (pid %s)", child.name, child.pid)

    async def add_node(self, name: str, *, labels: dict[str, str] | None = None, max_pods: int = 110,
                       kubelet_gates: dict[str, bool] | None = None) -> KubeletNode:
        """Start ``name``'s fake runtime and kubelet; ready once the kubelet serves its healthz."""
        b = self.spec.binaries
        paths = c.KubeletPaths(root=self.kubelets / name)
        for d in (paths.device_plugins, paths.pod_resources.parent, paths.recorded, paths.pod_logs):
            d.mkdir(parents=True, exist_ok=True)
        port, healthz = free_port(), free_port()
        serving = self.pki.server(f"kubelet-{name}", f"system:node:{name}", ("127.0.0.1", "localhost", name))
        paths.config.write_text(c.kubelet_config(paths, self.ca, serving, port=port, healthz_port=healthz,
                                                 max_pods=max_pods, feature_gates=kubelet_gates))
        paths.cri_socket.unlink(missing_ok=True)
        ip_prefix = f"127.{100 + len(self.nodes) % 150}"
        node_kubeconfig = self.kubeconfig_for(kubelet_identity(name))
        runtime = Child(f"fake-cri-{name}", c.fake_cri_argv(b["fake-cri"], paths, ip_prefix, node_kubeconfig),
                        self.logs / f"fake-cri-{name}.log", _socket_probe(paths.cri_socket))
        kubelet = Child(f"kubelet-{name}", c.kubelet_argv(
            b["kubelet"], paths, node_kubeconfig, name, labels,
            as_root=os.geteuid() == 0),
            self.logs / f"kubelet-{name}.log", http_probe(f"http://127.0.0.1:{healthz}/healthz"))
        node = KubeletNode(name=name, paths=paths, runtime=runtime, kubelet=kubelet)
        self.nodes[name] = node
        await self._start(runtime)
        await self._start(kubelet)
        return node

    async def stop(self) -> None:
        for node in reversed(list(self.nodes.values())):
            await node.kubelet.stop()
            await node.runtime.stop()
        for child in reversed(list(self.children.values())):
            await child.stop()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


def any_https_probe(port: int) -> Probe:
    """The controller manager and kube-scheduler serve with self-signed certificates of their own."""
    async def probe() -> bool:
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(f"https://127.0.0.1:{port}/healthz", ssl=False) as r:
            return r.status == 200
    return probe


def _socket_probe(path: Path) -> Probe:
    async def probe() -> bool:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_unix_connection(str(path))
            writer.close()
            return True
        return False
    return probe
