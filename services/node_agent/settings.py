"""Node-agent settings: one frozen dataclass, loaded CLI > env > file, plus HAMi's per-node overrides.

Owns every knob of the node-agent and the only reads of its environment (through
:mod:`shared.config`). HAMi's per-node ``config.json`` (``{"nodeconfig": [...]}``) is applied
on top for the entry whose ``name`` equals this node. It knows nothing about gRPC or NATS.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.config import SettingsError, coerce, environ_get, load_settings

ENV_PREFIX = "GPUBUS_NODE_AGENT_"

#: Replicas per GPU at most: keeps ``<UUID>-<i>`` within the kubelet's 63-character device ID
#: (40 + 1 + 3) and a ListAndWatch message of 8 GPUs far below gRPC's 4 MiB default.
MAX_SPLIT_COUNT = 1000
#: Memory/core scaling at most: oversubscribing a card 100 times is already no limit at all, and
#: registered MiB and cores must stay numbers every consumer can hold (int64 on the wire).
MAX_SCALING = 100.0
#: Preconfigured card memory at most (1 PiB): larger is a typo, and would overflow the wire.
MAX_DEVICE_MEMORY_MIB = 1 << 30
#: ``node-label``: the node's :data:`MODE_LABEL` chooses (extender when unset), per node pool.
MODES = ("extender", "dra", "node-label")
MODE_LABEL = "gpubus.io/mode"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeAgentSettings:
    """Everything one node-agent needs to know about its node, its kubelet and its limits."""

    node_name: str = ""
    """This node's name (required; falls back to the ``NODE_NAME`` env var HAMi's chart sets)."""
    simulate: str = ""
    """Simulated GPUs instead of NVML, e.g. ``4xA100-80GB`` (see services/node_agent/simulated.py)."""
    fail_on_init_error: bool = True
    """Exit when NVML is missing and nothing is simulated; when false, run advertising no devices."""
    device_split_count: int = 10
    """Replicas advertised per GPU: how many containers may share one card."""
    device_memory_scaling: float = 1.0
    """Registered memory = floor(physical MiB x this); > 1 oversubscribes (``CUDA_OVERSUBSCRIBE``)."""
    device_core_scaling: float = 1.0
    """Registered cores = int(100 x this)."""
    disable_core_limit: bool = False
    """Inject ``GPU_CORE_UTILIZATION_POLICY=disable`` into every container."""
    gpu_core_policy: str = "default"
    """``default``, ``force`` or ``disable``: HAMi-core's ``GPU_CORE_UTILIZATION_POLICY``."""
    lib_cuda_log_level: int = 1
    """HAMi-core's ``LIBCUDA_LOG_LEVEL`` (0 error, 1 warn, 3 info, 4 debug)."""
    operating_mode: str = "hami-core"
    """Sharing mode written to the register annotation (``hami-core``; ``mig``/``mps`` are reported only)."""
    preconfigured_device_memory: int = 0
    """MiB to assume when NVML cannot report a card's memory (0 = use NVML)."""
    resource_name: str = "nvidia.com/gpu"
    """Extended resource the kubelet advertises (HAMi's ``resourceCountName``)."""
    resource_memory_name: str = "nvidia.com/gpumem"
    """Memory resource (keep it the scheduler's): published in the Node's capacity and allocatable."""
    resource_cores_name: str = "nvidia.com/gpucores"
    """Cores resource (keep it the scheduler's): published in the Node's capacity and allocatable."""
    memory_factor: int = 1
    """MiB per unit of the memory resource (the scheduler's ``--memory-factor``)."""
    publish_capacity: bool = True
    """Publish the node's total and allocatable memory and cores on the Node's status (needs a
    Kubernetes API): ``kubectl describe node`` and quota tools see them."""
    hook_path: str = "/usr/local"
    """Host directory holding ``vgpu/libvgpu.so`` (HAMi's ``HOOK_PATH``)."""
    libvgpu_version: str = ""
    """Mount ``<hook>/vgpu/libvgpu.so.<this>`` when that file exists at start (HAMi's versioned copy)."""
    gdrcopy_enabled: bool = False
    """Set ``NVIDIA_GDRCOPY=enabled`` in every GPU container (HAMi's ``--gdrcopy-enabled``)."""
    gds_enabled: bool = False
    """Set ``NVIDIA_GDS=enabled`` in every GPU container (HAMi's ``--gds-enabled``)."""
    mofed_enabled: bool = False
    """Set ``NVIDIA_MOFED=enabled`` in every GPU container (HAMi's ``--mofed-enabled``)."""
    plugin_dir: str = "/var/lib/kubelet/device-plugins"
    """Directory of the kubelet's and our device plugin sockets."""
    plugin_socket_name: str = ""
    """Our socket file name in ``plugin_dir``; default ``nvidia-<resource suffix>.sock`` as HAMi."""
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    """Kubelet pod resources API socket used to verify assignments; empty disables the check."""
    node_config_file: str = ""
    """HAMi per-node ``config.json`` (``{"nodeconfig": [...]}``); empty = none."""
    filter_uuids: tuple[str, ...] = ()
    """GPU UUIDs to hide from the kubelet and the inventory."""
    filter_indexes: tuple[int, ...] = ()
    """GPU indexes to hide from the kubelet and the inventory."""
    enable_numa_topology: bool = True
    """Send each replica's NUMA node to the kubelet (topology manager hints)."""
    enable_preferred_allocation: bool = True
    """Advertise GetPreferredAllocation so the kubelet picks replicas of the decided GPUs."""
    allocate_wait_s: float = 5.0
    """How long Allocate waits for a decision that has not arrived yet, seconds."""
    verify_delay_s: float = 0.5
    """First delay before checking the kubelet's pod resources after a pod is allocated, seconds."""
    heartbeat_s: float = 30.0
    """Inventory heartbeat interval, seconds."""
    watch_interval_s: float = 1.0
    """How often the kubelet socket is checked for a kubelet restart, seconds."""
    health_recovery_s: float = 60.0
    """NVML: a device is healthy again after this long without a critical XID, seconds."""
    disable_healthchecks: str = ""
    """As ``DP_DISABLE_HEALTHCHECKS``: ``all``, ``xids`` or extra XIDs to ignore (comma list)."""
    enable_healthchecks: str = ""
    """As ``DP_ENABLE_HEALTHCHECKS``: ``all`` or XIDs to watch even though HAMi ignores them."""
    metrics_host: str = "0.0.0.0"
    """Bind address of the Prometheus ``/metrics`` endpoint."""
    metrics_port: int = 9394
    """Port of the Prometheus ``/metrics`` endpoint; 0 disables it."""
    kubeconfig: str = ""
    """Kubeconfig for writing the node register annotation; empty = in-cluster if available, else skip."""
    in_cluster: bool = False
    """Use the in-cluster service account to write the node register annotation."""
    mode: str = "extender"
    """``extender``: the device plugin, placements by gpubus's scheduler extender. ``dra``: a DRA
    kubelet plugin and a ResourceSlice of consumable-capacity devices, placements by kube-scheduler."""
    dra_driver: str = "gpubus.io"
    """DRA driver name (the DeviceClass selects it)."""
    dra_registry_dir: str = "/var/lib/kubelet/plugins_registry"
    """The kubelet's plugin registration directory (``<kubelet root>/plugins_registry``)."""
    dra_plugin_dir: str = "/var/lib/kubelet/plugins/gpubus.io"
    """Where the DRA service's socket and the prepared claims' state live."""
    dra_register_wait_s: float = 30.0
    """DRA mode: how long to wait for the kubelet's registration before publishing the slice."""
    cdi_dir: str = "/var/run/cdi"
    """Where prepared claims' CDI specs are written (the container runtime's CDI spec dir)."""
    log_level: str = "info"
    log_json: bool = False

    @property
    def kubelet_socket(self) -> Path:
        return Path(self.plugin_dir) / "kubelet.sock"

    @property
    def socket_name(self) -> str:
        if self.plugin_socket_name:
            return self.plugin_socket_name
        return f"nvidia-{self.resource_name.rsplit('/', 1)[-1]}.sock"

    @property
    def plugin_socket(self) -> Path:
        return Path(self.plugin_dir) / self.socket_name


def load(cli: Mapping[str, Any] | None = None, file: str | None = None) -> NodeAgentSettings:
    """Settings from CLI > ``GPUBUS_NODE_AGENT_*`` env > YAML file, then HAMi's names and per-node file."""
    merged = dict(cli or {})
    for field_name, env_name in (
        ("node_name", "NODE_NAME"),
        ("disable_healthchecks", "DP_DISABLE_HEALTHCHECKS"),
        ("enable_healthchecks", "DP_ENABLE_HEALTHCHECKS"),
        ("hook_path", "HOOK_PATH"),
    ):
        if merged.get(field_name) is None and environ_get(f"{ENV_PREFIX}{field_name.upper()}") is None:
            merged[field_name] = environ_get(env_name)
    settings = load_settings(NodeAgentSettings, cli=merged, env_prefix=ENV_PREFIX, file=file)
    if settings.node_config_file:
        settings = apply_node_config(settings, read_node_config(settings.node_config_file))
    return validate(settings)


def validate(settings: NodeAgentSettings) -> NodeAgentSettings:
    """Refuse values that would make the agent advertise nonsense."""
    if not settings.node_name:
        raise SettingsError("node name is required (--node-name or NODE_NAME)")
    if not 1 <= settings.device_split_count <= MAX_SPLIT_COUNT:
        raise SettingsError(
            f"device split count must be 1..{MAX_SPLIT_COUNT}, got {settings.device_split_count}"
        )
    for name in ("device_memory_scaling", "device_core_scaling"):
        value = getattr(settings, name)
        if not (math.isfinite(value) and 0 < value <= MAX_SCALING):
            raise SettingsError(f"{name.replace('_', ' ')} must be > 0 and <= {MAX_SCALING:g}, got {value}")
    if settings.gpu_core_policy not in ("default", "force", "disable"):
        raise SettingsError(
            f"gpu core policy must be default, force or disable, got {settings.gpu_core_policy!r}"
        )
    for name in ("resource_name", "resource_memory_name", "resource_cores_name"):
        value = getattr(settings, name)
        if "/" not in value:
            raise SettingsError(f"{name.replace('_', ' ')} {value!r} must look like domain/name")
    if settings.memory_factor < 1:
        raise SettingsError(f"memory factor must be >= 1, got {settings.memory_factor}")
    for name in ("heartbeat_s", "watch_interval_s"):
        if not getattr(settings, name) > 0 or math.isinf(getattr(settings, name)):
            raise SettingsError(f"{name} must be > 0 seconds, got {getattr(settings, name)}")
    for name in ("allocate_wait_s", "verify_delay_s", "health_recovery_s", "dra_register_wait_s"):
        if not getattr(settings, name) >= 0 or math.isinf(getattr(settings, name)):
            raise SettingsError(f"{name} must be >= 0 seconds, got {getattr(settings, name)}")
    if not 0 <= settings.preconfigured_device_memory <= MAX_DEVICE_MEMORY_MIB:
        raise SettingsError(
            f"preconfigured device memory must be 0..{MAX_DEVICE_MEMORY_MIB} MiB,"
            f" got {settings.preconfigured_device_memory}"
        )
    if "/" in settings.libvgpu_version:
        raise SettingsError(f"libvgpu version {settings.libvgpu_version!r} must not contain '/'")
    if settings.mode not in MODES:
        raise SettingsError(f"mode must be one of {', '.join(MODES)}, got {settings.mode!r}")
    if not settings.dra_driver or "/" in settings.dra_driver:
        raise SettingsError(f"dra driver {settings.dra_driver!r} must be a DNS subdomain such as gpubus.io")
    if not 0 <= settings.metrics_port <= 65535:
        raise SettingsError(f"metrics port must be 0..65535, got {settings.metrics_port}")
    return settings


def read_node_config(path: str) -> Mapping[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SettingsError(f"cannot read per-node config {path}: {e}") from e
    if not isinstance(doc, dict):
        raise SettingsError(f"per-node config {path} must be a JSON object")
    return doc


#: HAMi ``nodeconfig`` key -> our field name.
_NODE_CONFIG_FIELDS = {
    "operatingmode": "operating_mode",
    "devicesplitcount": "device_split_count",
    "devicememoryscaling": "device_memory_scaling",
    "devicecorescaling": "device_core_scaling",
    "preconfigureddevicememory": "preconfigured_device_memory",
    "libcudaloglevel": "lib_cuda_log_level",
    "enablenumatopology": "enable_numa_topology",
    "enablegetpreferredallocation": "enable_preferred_allocation",
}


def apply_node_config(settings: NodeAgentSettings, doc: Mapping[str, Any]) -> NodeAgentSettings:
    """Override ``settings`` with the ``nodeconfig`` entry named like this node (HAMi's format)."""
    entries = doc.get("nodeconfig", [])
    if not isinstance(entries, list):
        raise SettingsError("per-node config: 'nodeconfig' must be a list")
    entry = next((e for e in entries if isinstance(e, dict) and e.get("name") == settings.node_name), None)
    if entry is None:
        return settings
    hints = {f.name: f.type for f in dataclasses.fields(NodeAgentSettings)}
    changes: dict[str, Any] = {}
    for key, value in entry.items():
        field_name = _NODE_CONFIG_FIELDS.get(key.lower())
        if field_name is not None:
            changes[field_name] = coerce(value, _type_of(hints[field_name]), f"nodeconfig.{key}")
    changes.update(_filter_devices(entry.get("filterdevices")))
    return dataclasses.replace(settings, **changes)


def _type_of(annotation: Any) -> Any:
    return {"int": int, "float": float, "bool": bool, "str": str}.get(str(annotation), annotation)


def _filter_devices(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SettingsError("per-node config: 'filterdevices' must be an object")
    uuids = raw.get("uuid") or []
    indexes = raw.get("index") or []
    if not isinstance(uuids, list) or not isinstance(indexes, list):
        raise SettingsError("per-node config: filterdevices.uuid and .index must be lists")
    return {
        "filter_uuids": tuple(str(u) for u in uuids),
        "filter_indexes": tuple(coerce(i, int, "nodeconfig.filterdevices.index") for i in indexes),
    }
