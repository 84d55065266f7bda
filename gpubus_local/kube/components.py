"""Command lines and configuration files of the real Kubernetes components, one machine, loopback only.

Pure: paths and ports in, argv and YAML out. The choices that make a kubelet run without a
container runtime or cgroup enforcement (a fake CRI, no QoS cgroups, no node-allocatable
enforcement, cgroup v1 allowed, no swap check, no local-storage isolation) are the ones kubemark's
hollow nodes make; everything else is the components' defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from gpubus_local.kube.pki import Pair

SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
"""The service-account issuer: the name in-cluster clients know the API server by."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    kube_scheduler: int


def etcd_argv(binary: Path, data_dir: Path, ports: Ports) -> list[str]:
    client, peer = f"http://127.0.0.1:{ports.etcd_client}", f"http://127.0.0.1:{ports.etcd_peer}"
    return [str(binary), "--name", "gpubus", "--data-dir", str(data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"gpubus={peer}", "--listen-metrics-urls", "",
            "--log-level", "warn", "--quota-backend-bytes", str(2 << 30)]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiServerFiles:
    ca: Pair
    serving: Pair
    service_account: Pair
    kubelet_client: Pair


def apiserver_argv(binary: Path, files: ApiServerFiles, ports: Ports, *,
                   feature_gates: str = "", runtime_config: str = "") -> list[str]:
    argv = [str(binary),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            "--bind-address=127.0.0.1", f"--secure-port={ports.apiserver}", "--advertise-address=127.0.0.1",
            f"--tls-cert-file={files.serving.cert}", f"--tls-private-key-file={files.serving.key}",
            f"--client-ca-file={files.ca.cert}",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={files.service_account.cert}",
            f"--service-account-signing-key-file={files.service_account.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={files.kubelet_client.cert}",
            f"--kubelet-client-key={files.kubelet_client.key}",
            f"--kubelet-certificate-authority={files.ca.cert}",
            "--kubelet-preferred-address-types=InternalIP",
            # the "kubernetes" Service cannot point at loopback (Endpoints refuse 127.0.0.0/8); nothing
            # here reaches the API server through it
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true", "--profiling=false", "--v=1"]
    if feature_gates:
        argv.append(f"--feature-gates={feature_gates}")
    if runtime_config:
        argv.append(f"--runtime-config={runtime_config}")
    return argv


def controller_manager_argv(binary: Path, kubeconfig: Path, ca: Pair, service_account: Pair, ports: Ports,
                            *, feature_gates: str = "") -> list[str]:
    argv = [str(binary), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={ports.controller_manager}",
            f"--service-account-private-key-file={service_account.key}", f"--root-ca-file={ca.cert}",
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={ca.cert}", f"--cluster-signing-key-file={ca.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--leader-elect=false",
            "--controllers=*", "--profiling=false", "--v=1"]
    if feature_gates:
        argv.append(f"--feature-gates={feature_gates}")
    return argv


def default_scheduler_config(kubeconfig: Path) -> str:
    """The cluster's own kube-scheduler (profile ``default-scheduler``), as every cluster runs one."""
    return str(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "leaderElection": {"leaderElect": False},
    }, sort_keys=False))


def kube_scheduler_config(chart_config: str, *, kubeconfig: Path, extender_url: str,
                          extender_tls: dict[str, str] | None = None) -> str:
    """The chart's own kube-scheduler configuration, pointed at this machine: its kubeconfig, and
    the extender's local address instead of the pod-local one (everything else as the chart says)."""
    config = yaml.safe_load(chart_config)
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    for extender in config.get("extenders", []):
        extender["urlPrefix"] = extender_url
        if extender_tls is not None:
            extender["enableHTTPS"] = True
            extender["tlsConfig"] = extender_tls
    return str(yaml.safe_dump(config, sort_keys=False))


def kube_scheduler_argv(binary: Path, config: Path, kubeconfig: Path, port: int, *,
                        feature_gates: str = "") -> list[str]:
    argv = [str(binary), f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--v=1"]
    if feature_gates:
        argv.append(f"--feature-gates={feature_gates}")
    return argv


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeletPaths:
    """Where one node's kubelet keeps its state: everything under its own root."""

    root: Path

    @property
    def cri_socket(self) -> Path:
        return self.root / "cri.sock"

    @property
    def device_plugins(self) -> Path:
        """Where device plugins register (``kubelet.sock``) and serve their own sockets."""
        return self.root / "device-plugins"

    @property
    def pod_resources(self) -> Path:
        return self.root / "pod-resources" / "kubelet.sock"

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def recorded(self) -> Path:
        """The fake runtime's record of every container it was asked to create."""
        return self.root / "containers"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"


def kubelet_config(paths: KubeletPaths, ca: Path, serving: Pair, *, port: int, healthz_port: int,
                   max_pods: int = 110, feature_gates: dict[str, bool] | None = None) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": "127.0.0.1", "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "tlsCertFile": str(serving.cert), "tlsPrivateKeyFile": str(serving.key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.cri_socket}",
        "imageServiceEndpoint": f"unix://{paths.cri_socket}",
        "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
        "failSwapOn": False, "failCgroupV1": False, "localStorageCapacityIsolation": False,
        "makeIPTablesUtilChains": False, "protectKernelDefaults": False,
        "resolvConf": "", "podLogsDir": str(paths.pod_logs), "maxPods": max_pods,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "registerNode": True,
        "shutdownGracePeriod": "0s",
    }
    if feature_gates:
        config["featureGates"] = feature_gates
    return str(yaml.safe_dump(config, sort_keys=False))


DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
"""Where every kubelet serves its device-plugin registration socket: a constant in the kubelet
(``pluginapi.KubeletSocket``), not under ``--root-dir`` like the rest of its state."""


def kubelet_argv(binary: Path, paths: KubeletPaths, kubeconfig: Path, node: str,
                 labels: dict[str, str] | None = None, *, as_root: bool = True) -> list[str]:
    """The kubelet in a mount namespace of its own, where the node's ``device-plugins`` directory
    is bind-mounted on :data:`DEVICE_PLUGIN_DIR`: each kubelet of the machine then has its own
    registration socket, and its node-agent finds it in the node's directory."""
    kubelet = [str(binary), f"--config={paths.config}", f"--kubeconfig={kubeconfig}",
               f"--root-dir={paths.root}", f"--cert-dir={paths.root / 'pki'}",
               f"--hostname-override={node}", "--node-ip=127.0.0.1", "--v=1"]
    if labels:
        kubelet.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    unshare = ["unshare", "--mount", "--propagation", "private", *(() if as_root else ("--map-root-user",))]
    script = f'mkdir -p {DEVICE_PLUGIN_DIR} && mount --bind "$0" {DEVICE_PLUGIN_DIR} && exec "$@"'
    return [*unshare, "sh", "-c", script, str(paths.device_plugins), *kubelet]


def fake_cri_argv(binary: Path, paths: KubeletPaths, ip_prefix: str, kubeconfig: Path) -> list[str]:
    """The node's fake runtime; its pods get addresses in ``ip_prefix``.0.0/16 (loopback), and it
    reads their specs as the node (to let init containers finish)."""
    return [str(binary), f"--endpoint=unix://{paths.cri_socket}", f"--record-dir={paths.recorded}",
            f"--ip-prefix={ip_prefix}", f"--kubeconfig={kubeconfig}"]
