"""MIG on the node: the profiles a card in ``mig`` mode offers, and the instances it holds for pods.

The profiles are what NVML reports for the card (:class:`GiProfileInfo`) filtered by the allowlist
of models and profile names, as HAMi v2.10's device plugin does (``plugin/register.go``
``discoverMigProfiles``; the default list is the one of HAMi's Helm chart). Instances are created
at Allocate, exactly at the profile and placement the scheduler reserved, and destroyed when the
pod's allocation is released (HAMi ``plugin/migmgr.go``), through a :class:`MigPort` the device
source implements (NVML or the simulated cards). Knows neither gRPC, NATS nor the kubelet.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from services.node_agent.discovery import GiProfileInfo
from services.node_agent.errors import AllocateFailed
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceUUID,
    MigPlacement,
    MigProfile,
    PodUID,
)

log = logging.getLogger(__name__)

#: Models -> the profiles the scheduler may use on them: HAMi's chart default (``migProfileAllowlist``
#: in ``device-configmap.yaml``), plus the NVML names of H100 SXM and H200 that its entries miss.
DEFAULT_ALLOWLIST: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("A30",), ("1g.6gb", "2g.12gb", "4g.24gb")),
    (("A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"), ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb")),
    (("A100-SXM4-80GB", "A100-80GB-PCIe", "A100-PCIE-80GB"), ("1g.10gb", "2g.20gb", "3g.40gb", "7g.79gb")),
    (("H100-PCIE-80GB", "H100-SXM5-80GB", "H100 80GB HBM3"), ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")),
    (("H100-PCIE-94GB", "H100-SXM5-94GB"), ("1g.12gb", "2g.24gb", "3g.47gb", "7g.94gb")),
    (("H20", "H100 on GH200"), ("1g.12gb", "2g.24gb", "3g.48gb", "7g.96gb")),
    (("H200 NVL", "H200-SXM5", "H200"), ("1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb")),
    (("B200",), ("1g.23gb", "2g.45gb", "3g.90gb", "7g.180gb")),
    (("RTX PRO 6000 Blackwell Server Edition",), ("1g.24gb", "2g.48gb", "4g.96gb")),
)


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(t for t in re.split(r"[-\s_]+", text.lower()) if t)


def model_matches(entry: str, model: str) -> bool:
    """Whole tokens, as gpubus matches card types (``H20`` is not ``H200``; HAMi's substring test
    would give an H200 the H20 profiles)."""
    want, have = _tokens(entry), _tokens(model)
    return bool(want) and any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def allowed_profiles(
    model: str, allowlist: Iterable[tuple[Sequence[str], Sequence[str]]] = DEFAULT_ALLOWLIST
) -> tuple[str, ...]:
    """The profile names of the first allowlist entry naming the model; () when none does."""
    for models, profiles in allowlist:
        if any(model_matches(m, model) for m in models):
            return tuple(profiles)
    return ()


def slice_key(profile: str) -> str:
    """``1g.10gb`` -> ``1g`` (HAMi ``profileSliceKey``)."""
    return profile.split(".", 1)[0]


def card_profiles(
    model: str,
    capabilities: Sequence[GiProfileInfo],
    allowlist: Iterable[tuple[Sequence[str], Sequence[str]]] = DEFAULT_ALLOWLIST,
) -> tuple[MigProfile, ...]:
    """The allowed profiles NVML can place on the card, with HAMi's core figure: the share of the
    card's SMs, ceil(SMs x 100 / the largest profile's SMs)."""
    by_key = {c.slices: c for c in capabilities if c.placements}
    full = max((c.multiprocessors for c in capabilities), default=0)
    out: list[MigProfile] = []
    for name in allowed_profiles(model, allowlist):
        info = by_key.get(slice_key(name))
        if info is None:
            continue
        out.append(
            MigProfile(
                name=name,
                memory_mb=info.memory_mb,
                core=math.ceil(info.multiprocessors * 100 / full) if full else 0,
                slice_count=info.slice_count,
                placements=info.placements,
            )
        )
    return tuple(out)


def instance_count(capabilities: Sequence[GiProfileInfo], profiles: Sequence[MigProfile]) -> int:
    """The card's advertised replicas in mig mode: the most instances one offered profile allows."""
    keys = {slice_key(p.name) for p in profiles}
    return max((c.instance_count for c in capabilities if c.slices in keys), default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MigInstance:
    """A live GPU instance + compute instance, and the MIG device UUID a container sees."""

    gpu: DeviceUUID
    profile: str
    placement: MigPlacement
    mig_uuid: str
    gpu_instance_id: int
    compute_instance_id: int


class MigError(Exception):
    """The card refused to create or destroy an instance (the message says what NVML said)."""


@runtime_checkable
class MigPort(Protocol):
    """Creates and destroys MIG instances on this node's cards (NVML, or the simulated cards)."""

    async def create_instance(self, gpu: DeviceUUID, profile: str, placement: MigPlacement) -> MigInstance:
        """Exactly this profile at this placement, never another; :class:`MigError` when not possible."""
        ...

    async def destroy_instance(self, instance: MigInstance) -> None: ...

    async def live_instances(self, gpu: DeviceUUID) -> tuple[MigInstance, ...]:
        """Every GPU instance the card holds now (``profile`` may be only its slice key, ``1g``)."""
        ...


def claim_live(
    live: Sequence[MigInstance], allocations: Iterable[Allocation]
) -> tuple[dict[PodUID, dict[tuple[str, int], MigInstance]], tuple[MigInstance, ...]]:
    """Live instances matched to the ledger's reservations (same card, placement and slices), per
    pod and (container, card); and the rest, which no pod holds (HAMi ``ReconcileActiveAllocations``)."""
    free = list(live)
    held: dict[PodUID, dict[tuple[str, int], MigInstance]] = {}
    for a in allocations:
        if a.state is AllocationState.FAILED:
            continue
        for name, slot in zip(a.containers, a.devices, strict=False):
            for k, d in enumerate(slot):
                if d.mig is None:
                    continue
                want = (d.uuid, d.mig.placement, slice_key(d.mig.profile))
                match = next((i for i in free if (i.gpu, i.placement, slice_key(i.profile)) == want), None)
                if match is not None:
                    free.remove(match)
                    held.setdefault(a.pod_uid, {})[name, k] = match
    return held, tuple(free)


class MigInstances:
    """The instances this node created for pods: created at Allocate, destroyed at release."""

    def __init__(self, port: MigPort | None) -> None:
        self._port = port
        self._by_pod: dict[PodUID, dict[tuple[str, int], MigInstance]] = {}

    def held(self, pod_uid: PodUID) -> tuple[MigInstance, ...]:
        return tuple(self._by_pod.get(pod_uid, {}).values())

    async def ensure(
        self, pod_uid: PodUID, container: str, devices: Sequence[ContainerDevice]
    ) -> tuple[str, ...]:
        """The MIG UUID of each device of a container ("" for a shared card), creating what is missing.

        A repeated Allocate for the container reuses its instances; a failure destroys the ones this
        call created and raises :class:`AllocateFailed`, so nothing is left half made.
        """
        held = self._by_pod.setdefault(pod_uid, {})
        made: list[tuple[tuple[str, int], MigInstance]] = []
        out: list[str] = []
        try:
            for k, d in enumerate(devices):
                if d.mig is None:
                    out.append("")
                    continue
                instance = held.get((container, k))
                if instance is None:
                    instance = await self._create(d)
                    made.append(((container, k), instance))
                    held[container, k] = instance
                out.append(instance.mig_uuid)
        except (MigError, AllocateFailed) as e:
            for key, instance in reversed(made):
                held.pop(key, None)
                await self._destroy(instance)
            if not held:
                self._by_pod.pop(pod_uid, None)
            raise AllocateFailed(f"container {container}: {e}") from e
        return tuple(out)

    async def _create(self, d: ContainerDevice) -> MigInstance:
        assert d.mig is not None
        if self._port is None:
            raise AllocateFailed(f"GPU {d.uuid} was given a MIG instance, but this node cannot create one")
        instance = await self._port.create_instance(d.uuid, d.mig.profile, d.mig.placement)
        log.info(
            "created MIG %s (%s at slice %d, GI %d, CI %d) on %s",
            instance.mig_uuid,
            d.mig.profile,
            d.mig.placement.start,
            instance.gpu_instance_id,
            instance.compute_instance_id,
            d.uuid,
        )
        return instance

    async def recover(
        self, cards: Sequence[DeviceUUID], allocations: Iterable[Allocation], *, destroy: bool
    ) -> tuple[int, int]:
        """After a restart: adopt the live instances the ledger reserves and, when ``destroy`` (the
        whole ledger was read), destroy the others; (adopted, destroyed)."""
        if self._port is None:
            return 0, 0
        live = [i for gpu in cards for i in await self._port.live_instances(gpu)]
        held, orphans = claim_live(live, allocations)
        for pod, instances in held.items():
            self._by_pod.setdefault(pod, {}).update(instances)
        if destroy:
            for instance in orphans:
                await self._destroy(instance)
        return sum(len(v) for v in held.values()), len(orphans) if destroy else 0

    async def release(self, pod_uid: PodUID) -> int:
        """Destroy every instance the pod holds; how many were destroyed."""
        instances = self._by_pod.pop(pod_uid, {})
        for instance in instances.values():
            await self._destroy(instance)
        return len(instances)

    async def _destroy(self, instance: MigInstance) -> None:
        if self._port is None:
            return
        try:
            await self._port.destroy_instance(instance)
        except MigError as e:
            # NVML keeps the instance; it stays out of the scheduler's books only once it is gone
            log.error("cannot destroy MIG %s on %s: %s", instance.mig_uuid, instance.gpu, e)
        else:
            log.info("destroyed MIG %s on %s", instance.mig_uuid, instance.gpu)
