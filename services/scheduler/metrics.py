"""The scheduler's Prometheus metrics: HAMi's ``hami_*`` scheduler families and gpubus's own.

The HAMi families (reference/hami-contract.md §7) are produced at scrape time by a collector over
the ledger, so they cost nothing between scrapes; ``legacy`` switches to HAMi's pre-v2.9 names and
label names. gpubus's own counters and histograms are updated by the extender and binder.
One ``CollectorRegistry`` per app instance (no global registry). Must not know HTTP or NATS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.scheduler.ledger import Ledger
from services.scheduler.quota import NamespaceQuota
from shared.annotations import collapse_usage
from shared.model import AllocationState

MIB = 1024 * 1024
_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class _Names:
    memory_limit: str
    core_limit: str
    memory_allocated: str
    shared: str
    core_allocated: str
    overview: str
    memory_ratio: str
    vgpu_memory: str
    vgpu_core: str
    device_labels: tuple[str, str, str, str]
    cores_label: str
    memory_limit_label: str
    vgpu_labels: tuple[str, str, str, str, str]


_CURRENT = _Names(
    "hami_gpu_memory_limit_bytes",
    "hami_gpu_core_limit_ratio",
    "hami_gpu_memory_allocated_bytes",
    "hami_gpu_shared_count",
    "hami_gpu_core_allocated_ratio",
    "hami_node_gpu_overview",
    "hami_node_gpu_memory_allocated_ratio",
    "hami_vgpu_memory_allocated_bytes",
    "hami_vgpu_core_allocated_ratio",
    ("node", "device_uuid", "device_index", "device_type"),
    "device_cores",
    "device_memory_limit",
    ("namespace", "node", "pod", "container_index", "device_uuid"),
)
_LEGACY = _Names(
    "GPUDeviceMemoryLimit",
    "GPUDeviceCoreLimit",
    "GPUDeviceMemoryAllocated",
    "GPUDeviceSharedNum",
    "GPUDeviceCoreAllocated",
    "nodeGPUOverview",
    "nodeGPUMemoryPercentage",
    "vGPUMemoryAllocated",
    "vGPUCoreAllocated",
    ("nodeid", "deviceuuid", "deviceidx", "devicetype"),
    "devicecores",
    "devicememorylimit",
    ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid"),
)


class LedgerCollector(Collector):
    """Per-device and per-pod allocation gauges, computed from the ledger at scrape time."""

    def __init__(self, ledger: Ledger, *, legacy: bool = False) -> None:
        self._ledger = ledger
        self._n = _LEGACY if legacy else _CURRENT

    def collect(self) -> Iterator[GaugeMetricFamily]:
        n = self._n
        dl = list(n.device_labels)
        fams = {
            "mem_limit": GaugeMetricFamily(n.memory_limit, "Device memory limit of a GPU (bytes)", labels=dl),
            "core_limit": GaugeMetricFamily(n.core_limit, "Device core limit of a GPU (% of SMs)", labels=dl),
            "mem_alloc": GaugeMetricFamily(
                n.memory_allocated, "Device memory allocated on a GPU (bytes)", labels=[*dl, n.cores_label]
            ),
            "shared": GaugeMetricFamily(n.shared, "Containers sharing a GPU", labels=dl),
            "core_alloc": GaugeMetricFamily(n.core_allocated, "Cores allocated on a GPU (%)", labels=dl),
            "overview": GaugeMetricFamily(
                n.overview,
                "GPU overview on a node (allocated memory bytes)",
                labels=[*dl, n.cores_label, n.memory_limit_label],
            ),
            "ratio": GaugeMetricFamily(n.memory_ratio, "Allocated share of a GPU's memory", labels=dl),
        }
        for node in self._ledger.nodes():
            snap = self._ledger.snapshot(node)
            if snap is None:
                continue
            for d, u in zip(snap.devices, snap.usage, strict=True):
                labels = [node, d.id, str(d.index), d.type]
                fams["mem_limit"].add_metric(labels, d.devmem * MIB)
                fams["core_limit"].add_metric(labels, d.devcore)
                fams["mem_alloc"].add_metric([*labels, str(u.usedcores)], u.usedmem * MIB)
                fams["shared"].add_metric(labels, u.used)
                fams["core_alloc"].add_metric(labels, u.usedcores)
                fams["overview"].add_metric([*labels, str(u.usedcores), str(d.devmem * MIB)], u.usedmem * MIB)
                fams["ratio"].add_metric(labels, u.usedmem / d.devmem if d.devmem else 0.0)
        yield from fams.values()
        yield from self._per_pod()

    def _per_pod(self) -> Iterator[GaugeMetricFamily]:
        n = self._n
        mem = GaugeMetricFamily(
            n.vgpu_memory, "Memory allocated to a pod on a GPU (bytes)", labels=list(n.vgpu_labels)
        )
        core = GaugeMetricFamily(
            n.vgpu_core, "Cores allocated to a pod on a GPU (%)", labels=list(n.vgpu_labels)
        )
        for a in self._ledger.entries():
            if a.state in (AllocationState.FAILED, AllocationState.RESERVED):
                continue
            for i, (uuid, u) in enumerate(collapse_usage(a.devices, a.init_count).items()):
                labels = [a.namespace, a.node, a.name, str(i), uuid]
                mem.add_metric(labels, u.usedmem * MIB)
                core.add_metric(labels, u.usedcores)
        yield mem
        yield core


class QuotaCollector(Collector):
    """``hami_resource_quota_used{namespace,quota_name,limit}`` (legacy ``QuotaUsed``) and
    ``hami_resource_quota_limit{namespace,quota_name}``: per namespace and GPU resource, the ledger's
    usage (MiB or cores, each pod collapsed) against the quota's limit as written."""

    def __init__(
        self, ledger: Ledger, known: Callable[[], dict[str, NamespaceQuota]], *, legacy: bool = False
    ) -> None:
        self._ledger = ledger
        self._known = known
        self._legacy = legacy

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self._legacy:
            used = GaugeMetricFamily(
                "QuotaUsed",
                "resourcequota usage for a certain device",
                labels=["quotanamespace", "quotaName", "limit"],
            )
            limit = None
        else:
            used = GaugeMetricFamily(
                "hami_resource_quota_used",
                "resourcequota usage for a certain device",
                labels=["namespace", "quota_name", "limit"],
            )
            limit = GaugeMetricFamily(
                "hami_resource_quota_limit",
                "resourcequota limit for a certain device",
                labels=["namespace", "quota_name"],
            )
        for ns, quota in self._known().items():
            mem, cores = self._ledger.namespace_usage(ns)
            for q, value in ((quota.memory, mem), (quota.cores, cores)):
                if q is None:
                    continue
                used.add_metric([ns, q.resource, str(q.hard)], value)
                if limit is not None:
                    limit.add_metric([ns, q.resource], q.hard)
        yield used
        if limit is not None:
            yield limit


class _Live(Collector):
    """Gauges read from callables at scrape time (ledger size, leadership, stale nodes)."""

    def __init__(self, gauges: dict[str, tuple[str, Callable[[], float]]]) -> None:
        self._gauges = gauges

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, (doc, read) in self._gauges.items():
            yield GaugeMetricFamily(name, doc, value=read())


class _Children:
    """A labelled counter whose children are looked up once per label values: ``labels()``
    validates and escapes the values on every call, a cost paid on every extender request."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: Counter) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Counter] = {}

    def labels(self, *values: str) -> Counter:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class SchedulerMetrics:
    """Everything ``/metrics`` shows, in one per-app registry."""

    def __init__(self, ledger: Ledger, *, legacy: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.filter_seconds = Histogram(
            "gpubus_scheduler_filter_seconds", "Time to answer /filter", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.prioritize_seconds = Histogram(
            "gpubus_scheduler_prioritize_seconds",
            "Time to answer /prioritize",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.bind_seconds = Histogram(
            "gpubus_scheduler_bind_seconds", "Time to answer /bind", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.lease_wait_seconds = Histogram(
            "gpubus_scheduler_lease_wait_seconds",
            "Time a bind waited for its Allocate handoff slots (another pod of its size decided on its "
            "node and not yet allocated)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = _Children(
            Counter(
                "gpubus_scheduler_decisions",
                "Extender answers by verb and outcome",
                ["verb", "outcome"],
                registry=r,
            )
        )
        self.reasons = _Children(
            Counter(
                "gpubus_scheduler_filter_reasons",
                "Nodes rejected by filter, by reason name",
                ["reason"],
                registry=r,
            )
        )
        self.bad_requests = _Children(
            Counter(
                "gpubus_scheduler_bad_requests",
                "Unusable extender requests by kind",
                ["verb", "kind"],
                registry=r,
            )
        )
        self.released = _Children(
            Counter("gpubus_scheduler_released", "Ledger entries released, by why", ["why"], registry=r)
        )
        self.bind_pod_reads = _Children(
            Counter(
                "gpubus_scheduler_bind_pod_reads",
                "Where /bind read the pod it binds: the leader's pod watch, or the API server",
                ["source"],
                registry=r,
            )
        )
        self.adopted = Counter("gpubus_scheduler_adopted", "Bound pods adopted into the ledger", registry=r)
        self.bind_phase_patches = _Children(
            Counter(
                "gpubus_scheduler_bind_phase_patches",
                "hami.io/bind-phase pod patches by outcome (written, failed, dropped)",
                ["outcome"],
                registry=r,
            )
        )
        self.preemptions = _Children(
            Counter(
                "gpubus_scheduler_preemptions",
                "Preemption attempts for pods that fit nowhere, by outcome (preempted, no_plan, never, "
                "held, not_pending, gone, failed)",
                ["outcome"],
                registry=r,
            )
        )
        self.requeue_patches = _Children(
            Counter(
                "gpubus_scheduler_requeue_patches",
                "Refused pods nudged for kube-scheduler to retry, by outcome (patched, gone, failed)",
                ["outcome"],
                registry=r,
            )
        )
        self.input_errors = _Children(
            Counter(
                "gpubus_scheduler_input_errors",
                "Unusable input off the HTTP path: KV entries, pod annotations, forwarded binds",
                ["source", "kind"],
                registry=r,
            )
        )
        self.quota_errors = Counter(
            "gpubus_scheduler_quota_errors",
            "ResourceQuota problems: reads that failed, limits that are not integers",
            ["kind"],
            registry=r,
        )
        self._ledger = ledger
        self._legacy = legacy
        r.register(LedgerCollector(ledger, legacy=legacy))

    def input_error(self, source: str, kind: str) -> None:
        """Count one unusable input off the HTTP path (KV entries, events, pods)."""
        self.input_errors.labels(source, kind).inc()

    def watch_quotas(self, known: Callable[[], dict[str, NamespaceQuota]]) -> None:
        self.registry.register(QuotaCollector(self._ledger, known, legacy=self._legacy))

    def watch(self, gauges: dict[str, tuple[str, Callable[[], float]]]) -> None:
        self.registry.register(_Live(gauges))
