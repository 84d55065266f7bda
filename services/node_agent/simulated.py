"""Simulated GPUs for machines without any: the ``--simulate`` spec parser and a ``DeviceSource``.

Spec syntax (groups separated by ``,``, ``+`` or spaces; braces group key=value pairs)::

    4xA100-80GB                 four cards of a model from MODELS
    A10                         one card (count defaults to 1)
    2xA100-80GB@1               two cards on NUMA node 1
    2x{name=Foo,mem=24576,numa=1}   explicit: name (required), mem MiB (required), numa (0)
    4xA100-80GB+2xT4            several groups

UUIDs are deterministic per node name and position (``GPU-<uuid5>``), so a restarted agent
advertises the same replica IDs. Health is changed by :meth:`SimulatedSource.inject`.
Parsing is pure; the source owns only an asyncio queue.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from services.node_agent.discovery import HealthChange, PhysicalDevice
from services.node_agent.errors import SimSpecError
from shared.model import DeviceUUID

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

_NAMESPACE = uuid.UUID("6f1b3c2e-9d4a-4c8e-a1f0-3b7d9e2c5a10")
_GROUP = re.compile(r"\s*(?:(\d+)\s*[xX]\s*)?(\{[^{}]*\}|[A-Za-z0-9][\w.\-]*)(?:@(\d+))?\s*(?:[,+\s]|$)")


@dataclass(frozen=True, slots=True, kw_only=True)
class SimModel:
    name: str
    memory_mib: int
    numa: int = 0


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
        groups.append((count, model))
        pos = m.end()
    return tuple(groups)


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
                )
            )
    return tuple(devices)


class SimulatedSource:
    """A ``DeviceSource`` of made-up GPUs whose health changes only when told to."""

    def __init__(self, node: str, spec: str) -> None:
        self._devices = build_devices(node, spec)
        self._changes: asyncio.Queue[HealthChange | None] = asyncio.Queue()

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
