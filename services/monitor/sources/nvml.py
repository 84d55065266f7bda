"""Usage from NVML: per-device totals and per-process memory/SM use, mapped to pods via cgroups.

The NVML calls sit behind :class:`NvmlPort` (the real adapter is :class:`PynvmlPort`; tests use
a fake at this seam). A process is tied to its pod by ``/proc/<pid>/cgroup`` and to a container
by the ledger: the one container of that pod holding a slice of the device. Processes outside
Kubernetes pods, of pods the ledger does not know, or of a pod whose containers share the device
(ambiguous without the runtime's container names) are counted as unattributed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from services.monitor.cgroup import ProcCgroups
from services.monitor.errors import CgroupError, SourceUnavailable
from services.monitor.ledger import Ledger
from services.monitor.readings import ContainerReading, DeviceReading, HostReading, SourceReading

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmlDevice:
    index: int
    uuid: str
    name: str
    memory_used: int
    gpu_util: int = 0
    memory_util: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NvmlProcess:
    pid: int
    used_bytes: int


class NvmlPort(Protocol):
    """The few NVML queries the monitor needs; implementations raise ``SourceUnavailable``."""

    def devices(self) -> Sequence[NvmlDevice]: ...

    def processes(self, index: int) -> Sequence[NvmlProcess]: ...

    def process_utilization(self, index: int, since_us: int) -> dict[int, int]:
        """pid -> SM utilisation percent over samples newer than ``since_us``."""
        ...

    def close(self) -> None: ...


def device_type(name: str) -> str:
    """HAMi's device type: the NVML name, ``NVIDIA-`` prefixed unless it already starts so."""
    return name if name.startswith("NVIDIA") else f"NVIDIA-{name}"


class NvmlSource:
    name = "nvml"

    def __init__(self, port: NvmlPort, cgroups: ProcCgroups) -> None:
        self.port = port
        self.cgroups = cgroups
        self._since_us = 0

    def collect(self, ledger: Ledger, now: float) -> SourceReading:
        devices = self.port.devices()
        host = tuple(
            HostReading(
                uuid=d.uuid,
                index=d.index,
                type=device_type(d.name),
                used_bytes=d.memory_used,
                gpu_util=float(d.gpu_util),
                memory_util=float(d.memory_util),
            )
            for d in devices
        )
        sums: dict[tuple[str, str], dict[str, list[int]]] = {}
        unattributed = 0
        since = self._since_us
        self._since_us = int(now * 1e6)
        for dev in devices:
            util = self.port.process_utilization(dev.index, since)
            for proc in self.port.processes(dev.index):
                owner = self._owner(proc.pid, dev.uuid, ledger)
                if owner is None:
                    unattributed += 1
                    continue
                acc = sums.setdefault(owner, {}).setdefault(dev.uuid, [0, 0])
                acc[0] += proc.used_bytes
                acc[1] += util.get(proc.pid, 0)
        containers = tuple(
            _reading(pod_uid, container, per_dev, ledger) for (pod_uid, container), per_dev in sums.items()
        )
        return SourceReading(containers=containers, host=host, unattributed=unattributed)

    def close(self) -> None:
        self.port.close()

    def _owner(self, pid: int, uuid: str, ledger: Ledger) -> tuple[str, str] | None:
        try:
            ref = self.cgroups.of(pid)
        except CgroupError as e:
            log.debug("GPU process not attributed: %s", e)
            return None
        container = ledger.container_on(ref.pod_uid, uuid)
        return None if container is None else (ref.pod_uid, container)


def _reading(pod_uid: str, container: str, per_dev: dict[str, list[int]], ledger: Ledger) -> ContainerReading:
    vindex = {s.uuid: s.vindex for s in ledger.slices(pod_uid, container)}
    return ContainerReading(
        pod_uid=pod_uid,
        container=container,
        devices=tuple(
            DeviceReading(uuid=uuid, vindex=vindex.get(uuid, 0), used_bytes=used, sm_util=float(sm))
            for uuid, (used, sm) in sorted(per_dev.items(), key=lambda kv: vindex.get(kv[0], 0))
        ),
    )


class PynvmlPort:
    """:class:`NvmlPort` over ``pynvml`` (nvidia-ml-py); NVML errors become ``SourceUnavailable``."""

    def __init__(self) -> None:
        import pynvml

        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise SourceUnavailable(f"NVML init failed: {e}") from e

    def devices(self) -> Sequence[NvmlDevice]:
        n = self._nvml
        try:
            return [self._device(i, n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())]
        except n.NVMLError as e:
            raise SourceUnavailable(f"NVML device query failed: {e}") from e

    def _device(self, index: int, handle: Any) -> NvmlDevice:
        n = self._nvml
        memory = n.nvmlDeviceGetMemoryInfo(handle)
        util = n.nvmlDeviceGetUtilizationRates(handle)
        return NvmlDevice(
            index=index,
            uuid=_text(n.nvmlDeviceGetUUID(handle)),
            name=_text(n.nvmlDeviceGetName(handle)),
            memory_used=int(memory.used),
            gpu_util=int(util.gpu),
            memory_util=int(util.memory),
        )

    def processes(self, index: int) -> Sequence[NvmlProcess]:
        n = self._nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
            procs = n.nvmlDeviceGetComputeRunningProcesses(handle)
        except n.NVMLError as e:
            raise SourceUnavailable(f"NVML process query failed: {e}") from e
        return [NvmlProcess(pid=int(p.pid), used_bytes=int(p.usedGpuMemory or 0)) for p in procs]

    def process_utilization(self, index: int, since_us: int) -> dict[int, int]:
        n = self._nvml
        try:
            samples = n.nvmlDeviceGetProcessUtilization(n.nvmlDeviceGetHandleByIndex(index), since_us)
        except n.NVMLError:
            return {}  # NOT_FOUND when no process ran since the last sample, NOT_SUPPORTED on old GPUs
        out: dict[int, int] = {}
        for s in samples:
            out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as e:
            log.debug("NVML shutdown: %s", e)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
