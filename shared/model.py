"""The domain model every stage shares: devices, requests, placements, ledger entries.

Pure values only. Units: memory in MiB, cores in % of one GPU (100 = the whole card).
This module must not know about NATS, HTTP, gRPC or Kubernetes clients; wire shapes
(annotations, events) are converted to and from these types at the codecs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

NodeName = NewType("NodeName", str)
PodUID = NewType("PodUID", str)
DeviceUUID = NewType("DeviceUUID", str)

#: HAMi's "no percentage given" sentinel for ``mempercentagereq``.
PERCENT_UNSET = 101
#: The vendor word of every NVIDIA request and of the PodSingleDevice encoding.
NVIDIA = "NVIDIA"


class DeviceMode(StrEnum):
    """How a physical GPU is shared (HAMi's ``operatingmode``)."""

    HAMI_CORE = "hami-core"
    MIG = "mig"
    MPS = "mps"


@dataclass(frozen=True, slots=True, kw_only=True)
class MigPlacement:
    """Where a MIG GPU instance sits on its card: memory slices ``start`` .. ``start+size-1`` (NVML's
    ``nvmlGpuInstancePlacement_t``)."""

    start: int
    size: int

    def overlaps(self, other: MigPlacement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True, slots=True, kw_only=True)
class MigProfile:
    """A MIG profile a card in ``mig`` mode offers (HAMi's ``migProfiles`` entry, from NVML)."""

    name: str
    """``1g.10gb``: compute slices ``g``, then memory."""
    memory_mb: int
    """MiB of the instance (NVML ``memorySizeMB``)."""
    core: int
    """% of the card's SMs, rounded up (HAMi: ceil(SMs x 100 / the largest profile's SMs))."""
    slice_count: int
    placements: tuple[MigPlacement, ...]
    """Every placement NVML allows for the profile, in NVML's order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MigSlice:
    """The MIG instance one card of one container gets: a profile at a placement (HAMi's
    ``hami.io/vgpu-mig-allocations`` entry without its runtime identity)."""

    profile: str
    placement: MigPlacement


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceInfo:
    """One physical GPU as its node registers it (HAMi's node register JSON fields)."""

    id: DeviceUUID
    index: int = 0
    type: str
    """Model, ``NVIDIA-`` prefixed as HAMi writes it, e.g. ``NVIDIA-A100-SXM4-80GB``."""
    count: int = 10
    """Slots (split count): how many containers may share the card."""
    devmem: int
    """Registered memory in MiB (physical MiB x memory scaling)."""
    devcore: int = 100
    """Registered cores, 100 x core scaling."""
    numa: int = 0
    mode: str = DeviceMode.HAMI_CORE.value
    health: bool = True
    mig_profiles: tuple[MigProfile, ...] = ()
    """In ``mig`` mode: the profiles this card offers, with their legal placements."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceUsage:
    """What is already given out on one device: slots, MiB and cores (and MIG placements held)."""

    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    mig: tuple[MigPlacement, ...] = ()
    """Placements of the MIG instances reserved on the card (one per instance, repeats allowed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerRequest:
    """The GPU request of one container, derived exactly as HAMi derives it.

    ``memreq`` and ``mempercentagereq`` apply per card; ``mempercentagereq`` is
    :data:`PERCENT_UNSET` (101) when no percentage was given.
    """

    nums: int
    type: str = NVIDIA
    memreq: int = 0
    mempercentagereq: int = PERCENT_UNSET
    coresreq: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerSpec:
    """One container of a pod with its (possibly absent) GPU request."""

    name: str
    init: bool = False
    request: ContainerRequest | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRequest:
    """A pod's containers in slot order: init containers first, then app containers."""

    namespace: str
    name: str
    uid: PodUID
    containers: tuple[ContainerSpec, ...]
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def wants_gpu(self) -> bool:
        return any(c.request is not None for c in self.containers)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerDevice:
    """One card given to one container: the unit of the PodSingleDevice encoding."""

    uuid: DeviceUUID
    type: str = NVIDIA
    usedmem: int
    usedcores: int
    idx: int = 0
    """Device index on the node; not part of the HAMi encoding, kept for env ordering."""
    mig: MigSlice | None = None
    """On a card in ``mig`` mode: the MIG instance reserved (``usedmem``/``usedcores`` are its profile's)."""


#: One slot per container (init first, then app); an empty tuple is a container without GPU.
PodDevices = tuple[tuple[ContainerDevice, ...], ...]


class AllocationState(StrEnum):
    """Life of a ledger entry: reserved at filter/bind, decided when bound, then applied or failed."""

    RESERVED = "reserved"
    DECIDED = "decided"
    APPLIED = "applied"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """A pod's placement on a node: the ledger entry (KV ``allocations``, key = pod UID)."""

    pod_uid: PodUID
    namespace: str
    name: str
    node: NodeName
    devices: PodDevices
    containers: tuple[str, ...]
    """Container names in slot order (init first), same length as ``devices``."""
    init_count: int = 0
    """How many of the leading slots belong to init containers."""
    state: AllocationState = AllocationState.DECIDED
    decided_at: float = 0.0
    """Unix seconds when the scheduler decided it (``hami.io/bind-time``)."""
    expires_at: float = 0.0
    """For RESERVED entries: when the reservation lapses if no bind follows (unix seconds)."""
