"""Simulated GPUs for machines without any: the ``--simulate`` spec parser and a ``DeviceSource``.

Spec syntax (groups separated by ``,``, ``+`` or spaces; braces group key=value pairs)::

    4xA100-80GB                 four cards of a model from MODELS
    A10                         one card (count defaults to 1)
    2xA100-80GB@1               two cards on NUMA node 1
    2x{name=Foo,mem=24576,numa=1}   explicit: name (required), mem MiB (required), numa (0)
    4xA100-80GB+2xT4            several groups
    2xA100-80GB:mig             cards in MIG mode (models with MIG: see MIG_MODELS)

UUIDs are deterministic per node name and position (``GPU-<uuid5>``), so a restarted agent
advertises the same replica IDs. Health is changed by :meth:`SimulatedSource.inject`. A card in MIG
mode reports NVIDIA's geometry for its model (profiles, slices, legal placements; memory close to
what NVML reports) and holds the instances Allocate creates, as NVML would: only at a legal
placement that overlaps no live instance. Parsing is pure; the source owns an asyncio queue and
the live instances.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from services.node_agent.discovery import GiProfileInfo, HealthChange, PhysicalDevice
from services.node_agent.errors import SimSpecError
from services.node_agent.mig import MigError, MigInstance, slice_key
from shared.model import DeviceUUID, MigPlacement

#: Common models: spec name -> (NVML-style name, MiB).
MODELS: dict[str, tuple[str, int]] = {
    "T4": ("Tesla T4", 15360),
    "V100-16GB": ("Tesla V100-SXM2-16GB", 16384),
    "V100-32GB": ("Tesla V100-SXM2-32GB", 32768),
    "A10": ("A10", 24576),
    "A30": ("A30", 24576),
    "A40": ("A40", 46068),
    "A100-40GB": ("A100-SXM4-40GB", 40960),
    "A100-80GB": ("A100-SXM4-80GB", 81920),
    "L4": ("L4", 23034),
    "L40S": ("L40S", 46068),
    "H100-80GB": ("H100 80GB HBM3", 81559),
    "H20": ("H20", 97871),
    "H200": ("H200", 143771),
    "RTX4090": ("GeForce RTX 4090", 24564),
}



def _placements(size: int, starts: range) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start=s, size=size) for s in starts)


_Five = tuple[int, int, int, int, int]


def _eight_slices(mem: _Five, sms: _Five) -> tuple[GiProfileInfo, ...]:
    """A100/H100-class geometry: 8 memory slices, 7 compute slices (NVIDIA's MIG user guide)."""
    shapes = (("1g", 1, 7, _placements(1, range(7))), ("2g", 2, 3, _placements(2, range(0, 6, 2))),
              ("3g", 3, 2, _placements(4, range(0, 8, 4))), ("4g", 4, 1, _placements(4, range(1))),
              ("7g", 7, 1, _placements(8, range(1))))
    return tuple(
        GiProfileInfo(slices=k, memory_mb=m, multiprocessors=n, slice_count=c, instance_count=i, placements=p)
        for (k, c, i, p), m, n in zip(shapes, mem, sms, strict=True)
    )


def _four_slices(mem: tuple[int, int, int], sms: tuple[int, int, int]) -> tuple[GiProfileInfo, ...]:
    """A30 geometry: 4 memory slices, 4 compute slices."""
    shapes = (("1g", 1, 4, _placements(1, range(4))), ("2g", 2, 2, _placements(2, range(0, 4, 2))),
              ("4g", 4, 1, _placements(4, range(1))))
    return tuple(
        GiProfileInfo(slices=k, memory_mb=m, multiprocessors=n, slice_count=c, instance_count=i, placements=p)
        for (k, c, i, p), m, n in zip(shapes, mem, sms, strict=True)
    )


_A100_SMS = (14, 28, 42, 56, 98)
_H100_SMS = (16, 32, 60, 64, 132)
#: Spec name -> what NVML reports for the card's MIG mode (``:mig`` is refused for other models).
MIG_MODELS: dict[str, tuple[GiProfileInfo, ...]] = {
    "A30": _four_slices((5952, 11968, 24000), (14, 28, 56)),
    "A100-40GB": _eight_slices((4864, 9984, 20096, 20096, 40320), _A100_SMS),
    "A100-80GB": _eight_slices((9728, 19968, 40192, 40192, 80640), _A100_SMS),
    "H100-80GB": _eight_slices((9984, 20224, 40192, 40192, 80896), _H100_SMS),
    "H20": _eight_slices((12032, 24192, 48128, 48128, 96768), (10, 20, 30, 40, 78)),
    "H200": _eight_slices((17664, 35328, 70656, 70656, 140544), _H100_SMS),
}

_NAMESPACE = uuid.UUID("6f1b3c2e-9d4a-4c8e-a1f0-3b7d9e2c5a10")
_GROUP = re.compile(
    r"\s*(?:(\d+)\s*[xX]\s*)?(\{[^{}]*\}|[A-Za-z0-9][\w.\-]*)(?:@(\d+))?(:mig)?\s*(?:[,+\s]|$)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimModel:
    name: str
    memory_mib: int
    numa: int = 0
    mig: tuple[GiProfileInfo, ...] = ()
    """The card is in MIG mode with these capabilities (``:mig``)."""


def parse_spec(spec: str) -> tuple[tuple[int, SimModel], ...]:
    """``4xA100-80GB,2x{name=Foo,mem=1024}`` -> ((4, model), (2, model)); :class:`SimSpecError` if bad."""
    groups: list[tuple[int, SimModel]] = []
    pos = 0
    text = spec.strip()
    if not text:
        raise SimSpecError("empty device spec; expected e.g. 4xA100-80GB")
    while pos < len(text):
        m = _GROUP.match(text, pos)
        if m is None or m.end() == pos:
            raise SimSpecError(f"device spec {spec!r}: cannot parse at {text[pos:]!r}")
        count = int(m.group(1) or 1)
        if not 1 <= count <= 64:
            raise SimSpecError(f"device spec {spec!r}: count {count} outside 1..64")
        model = _model(m.group(2), spec)
        if m.group(3) is not None:
            model = replace(model, numa=int(m.group(3)))
        if m.group(4) is not None:
            model = replace(model, mig=_mig_capabilities(m.group(2), spec))
        groups.append((count, model))
        pos = m.end()
    return tuple(groups)


def _mig_capabilities(token: str, spec: str) -> tuple[GiProfileInfo, ...]:
    caps = MIG_MODELS.get(token) or MIG_MODELS.get(token.upper())
    if caps is None:
        raise SimSpecError(
            f"device spec {spec!r}: {token!r} has no MIG mode; MIG models: {', '.join(sorted(MIG_MODELS))}"
        )
    return caps


def _model(token: str, spec: str) -> SimModel:
    if not token.startswith("{"):
        known = MODELS.get(token) or MODELS.get(token.upper())
        if known is None:
            raise SimSpecError(
                f"device spec {spec!r}: unknown model {token!r}; known: {', '.join(sorted(MODELS))} "
                "or the explicit form {name=...,mem=MiB,numa=N}"
            )
        return SimModel(name=known[0], memory_mib=known[1])
    fields: dict[str, str] = {}
    for pair in token[1:-1].split(","):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SimSpecError(f"device spec {spec!r}: {pair!r} is not key=value")
        fields[key.strip().lower()] = value.strip()
    unknown = set(fields) - {"name", "mem", "numa"}
    if unknown or "name" not in fields or "mem" not in fields:
        raise SimSpecError(f"device spec {spec!r}: explicit form needs name= and mem= (and optional numa=)")
    if not fields["mem"].isdigit() or not fields.get("numa", "0").isdigit() or int(fields["mem"]) <= 0:
        raise SimSpecError(f"device spec {spec!r}: mem and numa must be non-negative integers, mem > 0")
    return SimModel(name=fields["name"], memory_mib=int(fields["mem"]), numa=int(fields.get("numa", "0")))


def simulated_uuid(node: str, index: int) -> DeviceUUID:
    """Deterministic per node and position, in NVIDIA's ``GPU-xxxxxxxx-...`` shape."""
    return DeviceUUID(f"GPU-{uuid.uuid5(_NAMESPACE, f'{node}/{index}')}")


def build_devices(node: str, spec: str) -> tuple[PhysicalDevice, ...]:
    devices: list[PhysicalDevice] = []
    for count, model in parse_spec(spec):
        for _ in range(count):
            index = len(devices)
            devices.append(
                PhysicalDevice(
                    uuid=simulated_uuid(node, index),
                    index=index,
                    name=model.name,
                    memory_mib=model.memory_mib,
                    numa=model.numa,
                    mig_enabled=bool(model.mig),
                    mig_capabilities=model.mig,
                )
            )
    return tuple(devices)


class SimulatedSource:
    """A ``DeviceSource`` of made-up GPUs whose health changes only when told to."""

    def __init__(self, node: str, spec: str) -> None:
        self._devices = build_devices(node, spec)
        self._changes: asyncio.Queue[HealthChange | None] = asyncio.Queue()
        self._instances: dict[DeviceUUID, list[MigInstance]] = {}

    def devices(self) -> tuple[PhysicalDevice, ...]:
        return self._devices

    def inject(self, change: HealthChange) -> None:
        """Report a health change as if the hardware had produced it."""
        self._changes.put_nowait(change)

    async def health_changes(self) -> AsyncIterator[HealthChange]:
        while (change := await self._changes.get()) is not None:
            yield change

    async def close(self) -> None:
        self._changes.put_nowait(None)

    # -- MIG (the MigPort of the simulated cards) ------------------------------------------------
    def instances(self, gpu: DeviceUUID) -> tuple[MigInstance, ...]:
        return tuple(self._instances.get(gpu, ()))

    async def create_instance(self, gpu: DeviceUUID, profile: str, placement: MigPlacement) -> MigInstance:
        device = next((d for d in self._devices if d.uuid == gpu), None)
        if device is None or not device.mig_enabled:
            raise MigError(f"GPU {gpu} is not a card in MIG mode on this node")
        info = next((c for c in device.mig_capabilities if c.slices == slice_key(profile)), None)
        if info is None:
            raise MigError(f"unsupported MIG profile {profile!r} on GPU {gpu}")
        if placement not in info.placements:
            raise MigError(f"scheduler selected invalid placement {placement} for profile {profile}")
        live = self._instances.setdefault(gpu, [])
        if any(placement.overlaps(i.placement) for i in live):
            raise MigError(f"create GI profile={profile} placement={placement}: Insufficient Resources")
        taken = {i.gpu_instance_id for i in live}
        gi = next(n for n in range(1, len(live) + 2) if n not in taken)
        instance = MigInstance(
            gpu=gpu,
            profile=profile,
            placement=placement,
            mig_uuid=f"MIG-{uuid.uuid5(_NAMESPACE, f'{gpu}/{gi}/{profile}/{placement.start}')}",
            gpu_instance_id=gi,
            compute_instance_id=0,
        )
        live.append(instance)
        return instance

    async def live_instances(self, gpu: DeviceUUID) -> tuple[MigInstance, ...]:
        return self.instances(gpu)

    async def destroy_instance(self, instance: MigInstance) -> None:
        live = self._instances.get(instance.gpu, [])
        if instance in live:  # an instance already gone counts as destroyed, as HAMi has it
            live.remove(instance)
