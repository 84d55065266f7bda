"""Prometheus exposition: HAMi's vGPUmonitor metrics (names and labels exact) plus gpubus's own.

A custom collector renders the monitors' latest views at scrape time into a per-app
``CollectorRegistry``. HAMi semantics are kept as they are, units included:
``hami_host_gpu_utilization_ratio`` is NVML's 0-100 percent and
``hami_container_device_utilization_ratio`` the summed SM percent, as HAMi exports them.
Every ``hami_*`` family carries the constant label ``zone="vGPU"`` (HAMi registers its collector
through a wrapping registerer); ``hami_build_info`` does not. With ``legacy=True`` the pre-v2.9
names are exported as well. No other module knows metric names.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.monitor.accounting import ContainerView, DeviceView, NodeView
from services.monitor.monitor import MonitorStats

ZONE = "vGPU"
HOST_LABELS = ["node", "device_index", "device_uuid", "device_type", "zone"]
HOST_MC_LABELS = ["device_index", "device_uuid", "device_type", "zone"]
CTR_LABELS = ["namespace", "pod", "container", "vdevice_index", "device_uuid", "zone"]
LEGACY_HOST_LABELS = ["nodeid", "deviceidx", "deviceuuid", "devicetype", "zone"]
LEGACY_CTR_LABELS = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone"]
LEGACY_MEM_LABELS = [*LEGACY_CTR_LABELS[:-1], "context", "module", "data", "offset", "zone"]

#: name -> (help, value of one device of one container); label sets are CTR_LABELS.
CONTAINER_GAUGES: dict[str, tuple[str, Callable[[DeviceView], float]]] = {
    "hami_vgpu_memory_used_bytes": ("vGPU device memory usage in bytes", lambda d: d.used_bytes),
    "hami_vgpu_memory_limit_bytes": ("vGPU device memory limit in bytes", lambda d: d.limit_bytes),
    "hami_container_device_memory_bytes": ("Container device memory usage in bytes", lambda d: d.used_bytes),
    "hami_container_device_utilization_ratio": ("Container device SM utilization ratio", lambda d: d.sm_util),
    "hami_vgpu_memory_context_bytes": (
        "Container device memory context size in bytes",
        lambda d: d.context_bytes,
    ),
    "hami_vgpu_memory_module_bytes": (
        "Container device memory module size in bytes",
        lambda d: d.module_bytes,
    ),
    "hami_vgpu_memory_buffer_bytes": (
        "Container device memory buffer size in bytes",
        lambda d: d.buffer_bytes,
    ),
}
LEGACY_CONTAINER_GAUGES: dict[str, tuple[str, Callable[[DeviceView], float]]] = {
    "vGPU_device_memory_usage_in_bytes": ("vGPU device usage", lambda d: d.used_bytes),
    "vGPU_device_memory_limit_in_bytes": ("vGPU device limit", lambda d: d.limit_bytes),
    "Device_utilization_desc_of_container": ("Container device utilization description", lambda d: d.sm_util),
}


class MonitorLike(Protocol):
    @property
    def node(self) -> str: ...
    @property
    def view(self) -> NodeView: ...
    @property
    def stats(self) -> MonitorStats: ...
    @property
    def ledger_size(self) -> int: ...
    @property
    def ledger_bad_limits(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildInfo:
    version: str
    revision: str = ""
    build_date: str = ""

    @classmethod
    def detect(cls) -> BuildInfo:
        try:
            version = metadata.version("gpubus")
        except metadata.PackageNotFoundError:
            version = "unknown"
        return cls(version=version)


class MonitorCollector(Collector):
    """Renders every monitor's latest view and stats on each scrape."""

    def __init__(
        self,
        monitors: Callable[[], Iterable[MonitorLike]],
        *,
        legacy: bool = False,
        build: BuildInfo | None = None,
        clock: Callable[[], float] = time.time,
        ledger_decode_errors: Callable[[], int] = lambda: 0,
    ) -> None:
        self.monitors = monitors
        self.legacy = legacy
        self.build = build or BuildInfo.detect()
        self.clock = clock
        self.ledger_decode_errors = ledger_decode_errors

    def collect(self) -> Iterator[Metric]:
        monitors = list(self.monitors())
        now = self.clock()
        yield self._build_info()
        yield from _host_families([m.view for m in monitors], self.legacy)
        yield from _container_families([m.view for m in monitors], now, self.legacy)
        yield from _own_families(monitors)
        bad = CounterMetricFamily(
            "gpubus_monitor_ledger_decode_errors", "Allocation/inventory KV entries that could not be decoded"
        )
        bad.add_metric([], self.ledger_decode_errors())
        yield bad

    def _build_info(self) -> Metric:
        info = GaugeMetricFamily(
            "hami_build_info",
            "hami build metadata exposed as labels with a constant value of 1.",
            labels=["version", "revision", "build_date", "go_version", "compiler", "platform"],
        )
        info.add_metric(
            [
                self.build.version,
                self.build.revision,
                self.build.build_date,
                platform.python_version(),
                platform.python_implementation().lower(),
                f"{platform.system().lower()}/{platform.machine()}",
            ],
            1,
        )
        return info


def _host_families(views: list[NodeView], legacy: bool) -> Iterator[Metric]:
    used = GaugeMetricFamily(
        "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", labels=HOST_LABELS
    )
    util = GaugeMetricFamily(
        "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", labels=HOST_LABELS
    )
    mc = GaugeMetricFamily(
        "hami_host_gpu_memory_controller_utilization_ratio",
        "GPU memory controller utilization ratio (0-100)",
        labels=HOST_MC_LABELS,
    )
    old_used = GaugeMetricFamily("HostGPUMemoryUsage", "GPU device memory usage", labels=LEGACY_HOST_LABELS)
    old_util = GaugeMetricFamily("HostCoreUtilization", "GPU core utilization", labels=LEGACY_HOST_LABELS)
    for view in views:
        for h in view.host:
            labels = [view.node, str(h.index), h.uuid, h.type, ZONE]
            used.add_metric(labels, h.used_bytes)
            util.add_metric(labels, h.gpu_util)
            mc.add_metric(labels[1:], h.memory_util)
            old_used.add_metric(labels, h.used_bytes)
            old_util.add_metric(labels, h.gpu_util)
    yield from (used, util, mc)
    if legacy:
        yield from (old_used, old_util)


def _container_families(views: list[NodeView], now: float, legacy: bool) -> Iterator[Metric]:
    gauges = {
        name: (GaugeMetricFamily(name, doc, labels=CTR_LABELS), value)
        for name, (doc, value) in CONTAINER_GAUGES.items()
    }
    old = {
        name: (GaugeMetricFamily(name, doc, labels=LEGACY_CTR_LABELS), value)
        for name, (doc, value) in LEGACY_CONTAINER_GAUGES.items()
    }
    elapsed = GaugeMetricFamily(
        "hami_container_last_kernel_elapsed_seconds",
        "Seconds since last kernel execution in container",
        labels=CTR_LABELS,
    )
    old_elapsed = GaugeMetricFamily(
        "Device_last_kernel_of_container",
        "Container device last kernel description",
        labels=LEGACY_CTR_LABELS,
    )
    old_mem = GaugeMetricFamily(
        "Device_memory_desc_of_container", "Container device memory description", labels=LEGACY_MEM_LABELS
    )
    for c, d in _devices(views):
        labels = [c.namespace, c.pod, c.container, str(d.vindex), d.uuid, ZONE]
        for family, value in (*gauges.values(), *old.values()):
            family.add_metric(labels, value(d))
        if c.last_kernel_time > 0:
            elapsed.add_metric(labels, max(now - c.last_kernel_time, 0.0))
            old_elapsed.add_metric(labels, max(now - c.last_kernel_time, 0.0))
        offset = d.used_bytes - d.context_bytes - d.module_bytes - d.buffer_bytes
        old_mem.add_metric(
            [*labels[:-1], str(d.context_bytes), str(d.module_bytes), str(d.buffer_bytes), str(offset), ZONE],
            d.used_bytes,
        )
    yield from (family for family, _ in gauges.values())
    yield elapsed
    if legacy:
        yield from (family for family, _ in old.values())
        yield from (old_mem, old_elapsed)


def _devices(views: list[NodeView]) -> Iterator[tuple[ContainerView, DeviceView]]:
    for view in views:
        for c in view.containers:
            for d in c.devices:
                yield c, d


#: name -> (help, value of one node's monitor); label set ``["node"]``.
NODE_GAUGES: dict[str, tuple[str, Callable[[MonitorLike], float]]] = {
    "gpubus_monitor_containers": (
        "Containers with usage in the last cycle",
        lambda m: len(m.view.containers),
    ),
    "gpubus_monitor_unknown_containers": (
        "Containers a source saw for pods not in the ledger",
        lambda m: m.view.unknown_containers,
    ),
    "gpubus_monitor_unattributed_processes": (
        "GPU processes not attributable to a ledger pod",
        lambda m: m.stats.unattributed,
    ),
    "gpubus_monitor_ledger_pods": ("Pods in the allocation ledger of the node", lambda m: m.ledger_size),
    "gpubus_monitor_cycle_seconds": ("Duration of the last collection cycle", lambda m: m.stats.last_cycle_s),
    "gpubus_monitor_containers_over_limit": (
        "Container device slices using more memory than their limit",
        lambda m: len(m.view.over_limit()),
    ),
}
NODE_COUNTERS: dict[str, tuple[str, Callable[[MonitorLike], float]]] = {
    "gpubus_monitor_usage_events": ("usage.sample events emitted", lambda m: m.stats.usage_events),
    "gpubus_monitor_over_limit_events": (
        "usage.over_limit events emitted",
        lambda m: m.stats.over_limit_events,
    ),
    "gpubus_monitor_cache_dirs_removed": (
        "Cache directories of gone pods removed",
        lambda m: m.stats.cache_dirs_removed,
    ),
    "gpubus_monitor_cleanup_errors": (
        "Cache directories that could not be removed",
        lambda m: m.stats.cleanup_errors,
    ),
    "gpubus_monitor_cycles": ("Collection cycles run", lambda m: m.stats.cycles),
    "gpubus_monitor_ledger_bad_limits": (
        "Decided memory slices too large to be a byte count (the source's own limit is used instead)",
        lambda m: m.ledger_bad_limits,
    ),
}


def _own_families(monitors: list[MonitorLike]) -> Iterator[Metric]:
    yield from _source_families(monitors)
    yield from _node_families(monitors)


def _source_families(monitors: list[MonitorLike]) -> Iterator[Metric]:
    """Per (node, source): samples, failures, up; per (node, source, reason): skipped inputs."""
    labels = ["node", "source"]
    samples = CounterMetricFamily(
        "gpubus_monitor_samples", "Container usage readings accepted, per source", labels=labels
    )
    failures = CounterMetricFamily(
        "gpubus_monitor_source_failures", "Collections in which a usage source failed", labels=labels
    )
    up = GaugeMetricFamily(
        "gpubus_monitor_source_up", "1 if the usage source worked in the last cycle", labels=labels
    )
    decode = CounterMetricFamily(
        "gpubus_monitor_decode_errors",
        "Inputs skipped because they could not be decoded or hold impossible byte counts",
        labels=[*labels, "reason"],
    )
    for m in monitors:
        st = m.stats
        for source in sorted(set(st.samples) | set(st.source_up) | set(st.source_failures)):
            samples.add_metric([m.node, source], st.samples[source])
            failures.add_metric([m.node, source], st.source_failures[source])
            up.add_metric([m.node, source], 1 if st.source_up.get(source, True) else 0)
        for (source, reason), count in sorted(st.decode_errors.items()):
            decode.add_metric([m.node, source, reason], count)
    yield from (samples, failures, up, decode)


def _node_families(monitors: list[MonitorLike]) -> Iterator[Metric]:
    """The per-node gauges and counters of :data:`NODE_GAUGES` and :data:`NODE_COUNTERS`."""
    families: list[tuple[GaugeMetricFamily | CounterMetricFamily, Callable[[MonitorLike], float]]] = [
        *((GaugeMetricFamily(n, doc, labels=["node"]), fn) for n, (doc, fn) in NODE_GAUGES.items()),
        *((CounterMetricFamily(n, doc, labels=["node"]), fn) for n, (doc, fn) in NODE_COUNTERS.items()),
    ]
    for family, fn in families:
        for m in monitors:
            family.add_metric([m.node], fn(m))
        yield family


def make_registry(collector: MonitorCollector) -> CollectorRegistry:
    """A per-app registry holding only the monitor's collector (no global registry, no process metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
