"""Simulated usage for simulated devices, driven by the ledger: plausible, deterministic, steerable.

Every running container (ledger state decided/applied) uses a stable fraction of its slice
(35-75 %, from a hash of pod UID, container and device) with a slow +-8 % wave over time, and SM
use in proportion to its cores. Pods matching an *overuse* pattern (``namespace/name`` or
``name``, shell-style wildcards) use ``overuse_factor`` x their slice instead, so a test or a
demo can make a container exceed its limit: set the patterns in settings
(``sim_overuse``) or at run time with :meth:`SimSource.set_overuse`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
from collections.abc import Iterable

from services.monitor.ledger import MIB, Ledger, Slice
from services.monitor.readings import ContainerReading, DeviceReading, HostReading, SourceReading
from shared.model import Allocation

#: Period of the usage wave, seconds.
WAVE_S = 120.0
CONTEXT_BYTES = 256 * MIB
MODULE_BYTES = 64 * MIB


def _unit(*parts: str) -> float:
    """A stable pseudo-random number in [0, 1) for ``parts``."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class SimSource:
    name = "sim"

    def __init__(self, *, overuse: Iterable[str] = (), overuse_factor: float = 1.25, seed: int = 0) -> None:
        self.overuse = tuple(overuse)
        self.overuse_factor = overuse_factor
        self.seed = str(seed)

    def set_overuse(self, patterns: Iterable[str]) -> None:
        """Pods whose containers should use more than their slice from the next cycle on."""
        self.overuse = tuple(patterns)

    def collect(self, ledger: Ledger, now: float) -> SourceReading:
        containers: list[ContainerReading] = []
        for allocation in ledger.active():
            over = self._overused(allocation)
            for name in allocation.containers:
                slices = ledger.slices(allocation.pod_uid, name)
                if slices:
                    containers.append(self._container(allocation.pod_uid, name, slices, over, now))
        return SourceReading(containers=tuple(containers), host=_host(ledger, containers))

    def close(self) -> None:
        pass

    def _overused(self, allocation: Allocation) -> bool:
        full = f"{allocation.namespace}/{allocation.name}"
        return any(
            fnmatch.fnmatchcase(full, p) or fnmatch.fnmatchcase(allocation.name, p) for p in self.overuse
        )

    def _container(
        self, pod_uid: str, name: str, slices: tuple[Slice, ...], over: bool, now: float
    ) -> ContainerReading:
        devices = []
        for s in slices:
            phase = _unit(self.seed, pod_uid, name, s.uuid)
            if over:
                fraction = self.overuse_factor
            else:
                fraction = 0.35 + 0.4 * phase + 0.08 * math.sin(2 * math.pi * (now / WAVE_S + phase))
            used = (int(s.limit_bytes * fraction) // MIB) * MIB
            context = min(used, CONTEXT_BYTES)
            module = min(used - context, MODULE_BYTES)
            sm = (s.cores or 100) * (0.4 + 0.5 * _unit(self.seed, "sm", pod_uid, name, s.uuid))
            devices.append(
                DeviceReading(
                    uuid=s.uuid,
                    vindex=s.vindex,
                    used_bytes=used,
                    limit_bytes=s.limit_bytes,
                    sm_util=round(sm, 1),
                    context_bytes=context,
                    module_bytes=module,
                    buffer_bytes=used - context - module,
                )
            )
        return ContainerReading(
            pod_uid=pod_uid,
            container=name,
            devices=tuple(devices),
            last_kernel_time=int(now) - int(10 * _unit(self.seed, "k", pod_uid, name)),
        )


def _host(ledger: Ledger, containers: list[ContainerReading]) -> tuple[HostReading, ...]:
    """Host totals per device: the registered devices (or, without inventory, the allocated ones)."""
    used: dict[str, int] = {}
    sm: dict[str, float] = {}
    for c in containers:
        for d in c.devices:
            used[d.uuid] = used.get(d.uuid, 0) + d.used_bytes
            sm[d.uuid] = sm.get(d.uuid, 0.0) + d.sm_util
    known: dict[str, tuple[int, str]] = {d.id: (d.index, d.type) for d in ledger.devices}
    for allocation in ledger.active():
        for name in allocation.containers:
            for s in ledger.slices(allocation.pod_uid, name):
                known.setdefault(s.uuid, (s.index, s.type))
    return tuple(
        HostReading(
            uuid=uuid,
            index=index,
            type=kind,
            used_bytes=used.get(uuid, 0),
            gpu_util=min(100.0, round(sm.get(uuid, 0.0), 1)),
            memory_util=min(100.0, round(0.6 * sm.get(uuid, 0.0), 1)),
        )
        for uuid, (index, kind) in sorted(known.items(), key=lambda kv: kv[1][0])
    )
