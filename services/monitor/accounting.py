"""Pure accounting: join source readings with the ledger into one node view, find limit crossings.

No I/O. Sources are merged in priority order (the order they were configured in): the first
source that reports a container (or a host device) wins it for this cycle. Containers of pods
the ledger does not know are left out (they are not gpubus pods, or already released).
A device's limit is the ledger's slice; the source's own figure is the fallback.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.monitor.ledger import Ledger
from services.monitor.readings import ContainerReading, HostReading, SourceReading
from shared.events import ContainerUsage, DeviceSample, Usage, UsageOverLimit

#: (pod UID, container, device UUID): one container's slice of one device.
SliceKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceView:
    vindex: int
    uuid: str
    used_bytes: int
    limit_bytes: int
    sm_util: float
    context_bytes: int = 0
    module_bytes: int = 0
    buffer_bytes: int = 0

    @property
    def over_limit(self) -> bool:
        return 0 < self.limit_bytes < self.used_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerView:
    namespace: str
    pod: str
    pod_uid: str
    container: str
    source: str
    devices: tuple[DeviceView, ...]
    last_kernel_time: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeView:
    """Everything known about one node after one collection cycle."""

    node: str
    at: float
    containers: tuple[ContainerView, ...] = ()
    host: tuple[HostReading, ...] = ()
    unknown_containers: int = 0
    """Containers a source reported for pods that are not in the ledger."""

    def over_limit(self) -> frozenset[SliceKey]:
        return frozenset(
            (c.pod_uid, c.container, d.uuid) for c in self.containers for d in c.devices if d.over_limit
        )


def merge(node: str, at: float, readings: Sequence[tuple[str, SourceReading]], ledger: Ledger) -> NodeView:
    """One view out of every source's reading, first source first."""
    containers: dict[tuple[str, str], ContainerView] = {}
    host: dict[str, HostReading] = {}
    unknown = 0
    for source, reading in readings:
        for c in reading.containers:
            key = (c.pod_uid, c.container)
            if key in containers:
                continue
            view = _container_view(source, c, ledger)
            if view is None:
                unknown += 1
                continue
            containers[key] = view
        for h in reading.host:
            host.setdefault(h.uuid, h)
    ordered = tuple(sorted(containers.values(), key=lambda v: (v.namespace, v.pod, v.container)))
    return NodeView(
        node=node,
        at=at,
        containers=ordered,
        host=tuple(sorted(host.values(), key=_index)),
        unknown_containers=unknown,
    )


def _index(h: HostReading) -> tuple[int, str]:
    return (h.index, h.uuid)


def _container_view(source: str, c: ContainerReading, ledger: Ledger) -> ContainerView | None:
    allocation = ledger.get(c.pod_uid)
    if allocation is None:
        return None
    devices = tuple(
        DeviceView(
            vindex=d.vindex,
            uuid=d.uuid,
            used_bytes=d.used_bytes,
            limit_bytes=ledger.limit_bytes(c.pod_uid, c.container, d.uuid) or d.limit_bytes,
            sm_util=d.sm_util,
            context_bytes=d.context_bytes,
            module_bytes=d.module_bytes,
            buffer_bytes=d.buffer_bytes,
        )
        for d in c.devices
    )
    return ContainerView(
        namespace=allocation.namespace,
        pod=allocation.name,
        pod_uid=c.pod_uid,
        container=c.container,
        source=source,
        devices=devices,
        last_kernel_time=c.last_kernel_time,
    )


def crossings(previous: frozenset[SliceKey], view: NodeView) -> tuple[frozenset[SliceKey], list[SliceKey]]:
    """Slices over their limit now, and those that crossed since ``previous`` (once per crossing).

    A slice that drops back to its limit (or disappears) re-arms: crossing again reports again.
    """
    now = view.over_limit()
    return now, sorted(now - previous)


def usage_events(view: NodeView, max_containers: int) -> list[Usage]:
    """The view as ``usage.sample`` events of at most ``max_containers`` containers each."""
    containers = [_container_usage(c) for c in view.containers]
    host = tuple(
        DeviceSample(uuid=h.uuid, used_bytes=h.used_bytes, utilization=h.gpu_util / 100.0) for h in view.host
    )
    if not containers:
        return [Usage(node=view.node, containers=(), host=host)]
    step = max(1, max_containers)
    return [
        Usage(node=view.node, containers=tuple(containers[i : i + step]), host=host if i == 0 else ())
        for i in range(0, len(containers), step)
    ]


def _container_usage(c: ContainerView) -> ContainerUsage:
    return ContainerUsage(
        namespace=c.namespace,
        pod=c.pod,
        pod_uid=c.pod_uid,
        container=c.container,
        devices=tuple(
            DeviceSample(
                uuid=d.uuid,
                used_bytes=d.used_bytes,
                limit_bytes=d.limit_bytes,
                utilization=min(d.sm_util, 100.0) / 100.0,
            )
            for d in c.devices
        ),
    )


def over_limit_events(view: NodeView, keys: Iterable[SliceKey]) -> list[UsageOverLimit]:
    wanted = set(keys)
    return [
        UsageOverLimit(
            node=view.node,
            namespace=c.namespace,
            pod=c.pod,
            pod_uid=c.pod_uid,
            container=c.container,
            uuid=d.uuid,
            used_bytes=d.used_bytes,
            limit_bytes=d.limit_bytes,
        )
        for c in view.containers
        for d in c.devices
        if (c.pod_uid, c.container, d.uuid) in wanted
    ]
