"""The event codec: every catalogue event round-trips; bad bodies raise EventDecodeError.

Matrix: each event kind x (encode -> decode equal); unknown fields ignored; missing kind,
unknown kind, missing/bool/old/newer version; not msgpack, not a map, oversize body;
wrong scalar types, wrong nested types, bad enum values, missing required fields.
"""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from shared.codec import MAX_EVENT_BYTES, decode, encode, from_wire, to_wire
from shared.errors import EventDecodeError
from shared.events import (
    CATALOGUE,
    AllocationApplied,
    AllocationDecided,
    AllocationFailed,
    AllocationMismatch,
    AllocationReleased,
    ContainerUsage,
    DeviceHealth,
    DeviceSample,
    Event,
    Inventory,
    PodAdmitted,
    PodPreempted,
    PodRejected,
    PodUnschedulable,
    Usage,
    UsageOverLimit,
)
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodUID,
)


def allocation() -> Allocation:
    dev = ContainerDevice(uuid=DeviceUUID("GPU-0"), usedmem=3000, usedcores=30, idx=0)
    return Allocation(pod_uid=PodUID("uid-1"), namespace="ns", name="p", node=NodeName("n1"),
                      devices=((), (dev, dev)), containers=("init", "main"), init_count=1,
                      state=AllocationState.APPLIED, decided_at=1.5, expires_at=2.0)


SAMPLES: list[Event] = [
    PodAdmitted(namespace="ns", name="p", uid="u", requests=(None, ContainerRequest(nums=1, memreq=3000)),
                mutations=("/spec/schedulerName",), scheduler_name="gpubus", node="n1"),
    PodRejected(namespace="ns", name="p", reason="bad quantity"),
    PodUnschedulable(namespace="ns", name="p", uid="u", reasons={"n1": "1/8 CardInsufficientMemory"}),
    AllocationDecided(allocation=allocation(), node="n1", source="scheduler/0"),
    AllocationReleased(pod_uid="u", namespace="ns", name="p", why="deleted"),
    AllocationApplied(pod_uid="u", namespace="ns", name="p", container="c", device_ids=("GPU-0-1",),
                      complete=True),
    AllocationFailed(reason="no such device"),
    AllocationMismatch(namespace="ns", name="p", container="c", expected=("a",), actual=("b",)),
    Inventory(devices=tuple(DeviceInfo(id=DeviceUUID(f"GPU-{i}"), index=i, type="NVIDIA-A100",
                                       devmem=81920) for i in range(8)), generation=3, node="n1"),
    DeviceHealth(uuid="GPU-0", healthy=False, reason="Xid 79"),
    Usage(containers=(ContainerUsage(namespace="ns", pod="p", pod_uid="u", container="c",
                                     devices=(DeviceSample(uuid="GPU-0", used_bytes=1 << 30,
                                                           limit_bytes=2 << 30, utilization=0.5),)),),
          host=(DeviceSample(uuid="GPU-0", used_bytes=5),)),
    UsageOverLimit(namespace="ns", pod="p", pod_uid="u", container="c", uuid="GPU-0", used_bytes=3,
                   limit_bytes=2),
    PodPreempted(namespace="ns", name="v", uid="vu", priority=100, beneficiary_namespace="ns",
                 beneficiary_name="p", beneficiary_uid="u", beneficiary_priority=1000, card="GPU-0",
                 reason="n1: 1/8 CardInsufficientMemory", node="n1"),
]


def test_samples_cover_the_whole_catalogue() -> None:
    assert {type(e).KIND for e in SAMPLES} == set(CATALOGUE)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).KIND)
def test_every_event_round_trips(event: Event) -> None:
    assert decode(encode(event)) == event


def body_of(event: Event) -> dict[str, object]:
    return dict(msgpack.unpackb(encode(event)))


def test_unknown_fields_are_ignored() -> None:
    event = SAMPLES[4]
    body = body_of(event) | {"added_in_v1_7": {"x": 1}}
    assert decode(msgpack.packb(body)) == event


def test_older_minor_body_without_optional_fields_decodes_with_defaults() -> None:
    body = {"kind": "device.health", "v": 1, "uuid": "GPU-1", "healthy": True}
    event = decode(msgpack.packb(body))
    assert isinstance(event, DeviceHealth) and event.reason == "" and event.node == ""


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"kind": None}, "unknown event kind"),
        ({"kind": "no.such"}, "unknown event kind"),
        ({"v": 2}, "unsupported major version 2"),
        ({"v": 0}, "unsupported major version 0"),
        ({"v": True}, "invalid version"),
        ({"v": "1"}, "invalid version"),
        ({"why": 7}, "expected str, got int"),
        ({"ts": "yesterday"}, "expected float, got str"),
    ],
)
def test_bad_envelope_or_field_types_are_refused(change: dict[str, object], reason: str) -> None:
    body = body_of(SAMPLES[4]) | change
    with pytest.raises(EventDecodeError, match=reason):
        decode(msgpack.packb(body))


def test_missing_version_is_refused() -> None:
    body = body_of(SAMPLES[4])
    del body["v"]
    with pytest.raises(EventDecodeError, match="invalid version"):
        decode(msgpack.packb(body))


def test_missing_required_field_is_refused() -> None:
    body = body_of(SAMPLES[4])
    del body["why"]
    with pytest.raises(EventDecodeError, match="missing field 'why'"):
        decode(msgpack.packb(body))


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        (("allocation", "state"), "exploded", "invalid enum value 'exploded'"),
        (("allocation", "devices"), "GPU-0", "expected array, got str"),
        (("allocation", "init_count"), True, "expected int, got bool"),
        (("allocation",), [1, 2], "expected object, got array"),
        (("allocation", "init_count"), -1, "out of range"),
        (("allocation", "devices", 1, 0, "usedmem"), -80000, "out of range"),
        (("allocation", "devices", 1, 0, "usedcores"), 1 << 63, "out of range"),
        (("allocation", "decided_at"), float("nan"), "not a finite number"),
        (("allocation", "decided_at"), float("inf"), "not a finite number"),
        (("allocation", "decided_at"), -1.0, "not a finite number"),
        (("allocation", "decided_at"), -1, "not a finite number"),
        (("ts",), float("-inf"), "not a finite number"),
    ],
)
def test_wrong_nested_types_are_refused(path: tuple[str, ...], value: object, reason: str) -> None:
    body = body_of(SAMPLES[3])
    target = body
    for key in path[:-1]:
        target = target[key]  # type: ignore[assignment]
    target[path[-1]] = value
    with pytest.raises(EventDecodeError, match=reason):
        decode(msgpack.packb(body))


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x92\x01", msgpack.packb("a string"), msgpack.packb(None)])
def test_malformed_bodies_are_refused(data: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode(data)


def test_oversize_body_is_refused_before_unpacking() -> None:
    with pytest.raises(EventDecodeError, match="exceeds"):
        decode(b"\x00" * (MAX_EVENT_BYTES + 1))


def test_non_string_map_keys_are_refused() -> None:
    with pytest.raises(EventDecodeError):
        decode(msgpack.packb({1: "x", "kind": "device.health"}, strict_types=False))


def test_to_wire_and_from_wire_round_trip_a_model_value() -> None:
    value = allocation()
    assert from_wire(Allocation, to_wire(value)) == value


def test_events_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SAMPLES[0].id = "x"  # type: ignore[misc]
