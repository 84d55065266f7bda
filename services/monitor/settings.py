"""Monitor settings: one frozen dataclass, loaded CLI > env ``GPUBUS_MONITOR_*`` > YAML file.

The only reads of the monitor's environment (through :mod:`shared.config`); HAMi's
``NODE_NAME`` and ``HOOK_PATH`` are honoured when the gpubus names are not set. NATS settings
are the shared :class:`shared.bus.BusSettings` (env ``GPUBUS_BUS_*``). Knows nothing about
sources, metrics or NATS beyond their settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from shared.bus import BusSettings
from shared.config import SettingsError, environ_get, load_settings
from shared.service import load_bus_settings

ENV_PREFIX = "GPUBUS_MONITOR_"


class SourceKind(StrEnum):
    HAMI_CORE = "hami-core"
    NVML = "nvml"
    SIM = "sim"


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorSettings:
    """Everything the monitor of one or more nodes needs."""

    nodes: tuple[str, ...] = ()
    """Nodes to monitor (required; falls back to ``NODE_NAME``). Several = one process for many
    simulated nodes, each with its own ledger, sources and cache directory."""
    hook_path: str = "/usr/local/vgpu"
    """HAMi-core's directory as the monitor sees it (HAMi's monitor ``HOOK_PATH``); cache files are
    under ``<hook_path>/containers``. ``{node}`` is replaced by the node name (simulated nodes)."""
    sources: tuple[str, ...] = (SourceKind.HAMI_CORE.value,)
    """Usage sources in priority order: ``hami-core``, ``nvml``, ``sim``."""
    metrics_bind: str = "0.0.0.0"
    """Bind address of ``/metrics``."""
    metrics_port: int = 9394
    """Port of ``/metrics`` (HAMi's vGPUmonitor default); 0 picks a free port."""
    legacy_metrics: bool = False
    """Also export HAMi's pre-v2.9 metric names."""
    interval_s: float = 5.0
    """Collection interval, seconds."""
    publish_interval_s: float = 15.0
    """Least time between two ``usage.sample`` events of a node, seconds (over-limit events are immediate)."""
    max_containers_per_event: int = 256
    """Containers per ``usage.sample`` event; larger nodes send several."""
    proc_root: str = "/proc"
    """Where ``<pid>/cgroup`` files are read for the NVML source (the host's /proc in a pod)."""
    cleanup_interval_s: float = 60.0
    """How often stale cache directories are looked for, seconds; 0 disables cleanup."""
    cleanup_grace_s: float = 300.0
    """A directory of an unknown pod is removed once unchanged this long (HAMi's resync interval), seconds."""
    resync_interval_s: float = 300.0
    """Full ledger rebuild from the ``allocations`` bucket this often (events keep it current between)."""
    sim_overuse: tuple[str, ...] = ()
    """Sim source: pods (``namespace/name`` or ``name``, wildcards allowed) that use more than their slice."""
    sim_overuse_factor: float = 1.25
    """Sim source: how many times its slice an overusing container uses."""
    sim_seed: int = 0
    """Sim source: seed of the per-container usage pattern."""
    log_level: str = "info"
    log_json: bool = False

    def __post_init__(self) -> None:
        unknown = [s for s in self.sources if s not in {k.value for k in SourceKind}]
        if unknown:
            raise SettingsError(f"unknown usage source(s) {unknown}; choose from hami-core, nvml, sim")
        if self.interval_s <= 0:
            raise SettingsError("interval_s must be positive")

    def hook_path_for(self, node: str) -> str:
        return self.hook_path.replace("{node}", node)


def load(cli: Mapping[str, Any] | None = None, file: str | None = None) -> MonitorSettings:
    """Settings from CLI > ``GPUBUS_MONITOR_*`` env > YAML file, then HAMi's ``NODE_NAME``/``HOOK_PATH``."""
    merged = dict(cli or {})
    for field_name, env_name in (("nodes", "NODE_NAME"), ("hook_path", "HOOK_PATH")):
        if not merged.get(field_name) and environ_get(f"{ENV_PREFIX}{field_name.upper()}") is None:
            merged[field_name] = environ_get(env_name)
    settings = load_settings(MonitorSettings, cli=merged, env_prefix=ENV_PREFIX, file=file)
    if not settings.nodes:
        raise SettingsError("no node to monitor: pass --node or set NODE_NAME")
    return settings


def load_bus(url: str | None = None, creds_file: str | None = None, tls_ca: str | None = None,
             replicas: int | None = None) -> BusSettings:
    return load_bus_settings("gpubus-monitor", url=url, creds_file=creds_file, tls_ca=tls_ca,
                             replicas=replicas)
