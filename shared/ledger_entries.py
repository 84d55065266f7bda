"""The codec of ledger entries: :class:`Allocation` <-> msgpack bytes in the KV ``allocations`` bucket.

Every reader (scheduler, monitor, node-agent) goes through :func:`decode_entry`, which also
refuses an entry that names another pod than its key: the ledger is keyed by pod UID, and such an
entry would replace that pod's own entry in a reader's memory while KV keeps both.

A cold start decodes every entry (100k at scale), and the generic type-driven ``from_wire`` spends
most of that time walking type hints. :func:`decode_allocation` therefore reads the shape every
writer produces with plain type checks, and hands anything it does not recognise to ``from_wire``,
so what is accepted, and every ``EventDecodeError`` message, is exactly the generic codec's.

Must not know the ledger, NATS or the Fit engine. Pure.
"""

from __future__ import annotations

from typing import Any

import msgpack

from shared.codec import INT_MAX, from_wire, to_wire
from shared.errors import EventDecodeError
from shared.model import NVIDIA, Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

_STATES = {s.value: s for s in AllocationState}
_INF = float("inf")


class _Unusual(Exception):
    """The body is not in the common shape; the generic codec decides (and words any error)."""


def encode_allocation(allocation: Allocation) -> bytes:
    return bytes(msgpack.packb(to_wire(allocation), use_bin_type=True))


class KeyMismatch(EventDecodeError):
    """A well-formed KV entry stored under another's key (a pod's, or a node's inventory)."""


def decode_entry(key: str, value: bytes) -> Allocation:
    """The entry stored under ``key``; :class:`KeyMismatch` when it names another pod, else
    ``EventDecodeError`` as :func:`decode_allocation` words it."""
    allocation = decode_allocation(value)
    if allocation.pod_uid != key:
        raise KeyMismatch(f"ledger entry {key} names pod {allocation.pod_uid}")
    return allocation


def decode_allocation(value: bytes) -> Allocation:
    """Bytes from KV -> Allocation; EventDecodeError (as ``from_wire`` words it) when unusable."""
    try:
        body = msgpack.unpackb(value, raw=False)
    except Exception as e:
        raise EventDecodeError(f"allocation entry is not valid msgpack: {e}") from e
    try:
        return _fast(body)
    except (_Unusual, KeyError, TypeError):
        return from_wire(Allocation, body)


def _fast(body: Any) -> Allocation:
    # straight-line on purpose: this runs 100k times in a cold start; any surprise goes generic
    if type(body) is not dict:
        raise _Unusual
    uid, namespace, name, node = body["pod_uid"], body["namespace"], body["name"], body["node"]
    containers = body["containers"]
    init_count = body.get("init_count", 0)
    state = _STATES.get(body.get("state", "decided"))
    decided_at = body.get("decided_at", 0.0)
    expires_at = body.get("expires_at", 0.0)
    if (
        type(uid) is not str
        or type(namespace) is not str
        or type(name) is not str
        or type(node) is not str
        or type(containers) is not list
        or type(init_count) is not int
        or not 0 <= init_count <= INT_MAX
        or state is None
        or not _is_time(decided_at)
        or not _is_time(expires_at)
    ):
        raise _Unusual
    for c in containers:
        if type(c) is not str:
            raise _Unusual
    return Allocation(
        pod_uid=PodUID(uid),
        namespace=namespace,
        name=name,
        node=NodeName(node),
        devices=_devices(body["devices"]),
        containers=tuple(containers),
        init_count=init_count,
        state=state,
        decided_at=float(decided_at),
        expires_at=float(expires_at),
    )


def _is_time(x: Any) -> bool:
    """What the generic codec accepts for a float field: a finite float >= 0 or an int in range."""
    if type(x) is float:
        return 0.0 <= x < _INF
    return type(x) is int and 0 <= x <= INT_MAX


def _devices(raw: Any) -> tuple[tuple[ContainerDevice, ...], ...]:
    if type(raw) is not list:
        raise _Unusual
    slots: list[tuple[ContainerDevice, ...]] = []
    for slot in raw:
        if type(slot) is not list:
            raise _Unusual
        cards: list[ContainerDevice] = []
        for d in slot:
            if type(d) is not dict:
                raise _Unusual
            uuid, kind, mem, cores, idx = (
                d["uuid"],
                d.get("type", NVIDIA),
                d["usedmem"],
                d["usedcores"],
                d.get("idx", 0),
            )
            if (
                d.get("mig") is not None  # a MIG card: the generic codec reads its slice
                or type(uuid) is not str
                or type(kind) is not str
                or type(mem) is not int
                or type(cores) is not int
                or type(idx) is not int
                or not 0 <= mem <= INT_MAX
                or not 0 <= cores <= INT_MAX
                or not 0 <= idx <= INT_MAX
            ):
                raise _Unusual
            card = ContainerDevice(uuid=DeviceUUID(uuid), type=kind, usedmem=mem, usedcores=cores, idx=idx)
            cards.append(card)
        slots.append(tuple(cards))
    return tuple(slots)
