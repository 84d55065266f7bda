"""The ledger entry codec: decoding entry bytes agrees with the generic ``from_wire``.

Case matrix: round trips of entries with several containers, init slots, every state and optional
fields left out; and for unusual bodies (wrong types, missing fields, unknown state, bools for ints,
not a map) the very same value or the very same EventDecodeError message as the generic codec.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.codec import from_wire, to_wire
from shared.errors import EventDecodeError
from shared.ledger_entries import KeyMismatch, decode_allocation, decode_entry, encode_allocation
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

_device = st.builds(
    ContainerDevice,
    uuid=st.text(min_size=1, max_size=8).map(DeviceUUID),
    type=st.sampled_from(["NVIDIA", "NVIDIA-A100"]),
    usedmem=st.integers(0, 1 << 20),
    usedcores=st.integers(0, 100),
    idx=st.integers(0, 7),
)
_allocation = st.builds(
    Allocation,
    pod_uid=st.text(max_size=8).map(PodUID),
    namespace=st.text(max_size=8),
    name=st.text(max_size=8),
    node=st.text(max_size=8).map(NodeName),
    devices=st.lists(st.lists(_device, max_size=3).map(tuple), max_size=3).map(tuple),
    containers=st.lists(st.text(max_size=4), max_size=3).map(tuple),
    init_count=st.integers(0, 2),
    state=st.sampled_from(list(AllocationState)),
    decided_at=st.floats(0, 2e9),
    expires_at=st.floats(0, 2e9),
)


@given(_allocation)
def test_every_entry_round_trips_through_kv_bytes(allocation: Allocation) -> None:
    assert decode_allocation(encode_allocation(allocation)) == allocation


def _good() -> dict[str, Any]:
    return {
        "pod_uid": "u1",
        "namespace": "ns",
        "name": "p",
        "node": "n1",
        "devices": [[{"uuid": "GPU-0", "usedmem": 1000, "usedcores": 10}]],
        "containers": ["main"],
    }


def test_optional_fields_take_their_defaults() -> None:
    got = decode_allocation(msgpack.packb(_good()))
    assert got == from_wire(Allocation, _good())
    assert got.state is AllocationState.DECIDED and got.devices[0][0].type == "NVIDIA"


def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = _good()
    target: Any = body
    for step in path[:-1]:
        target = target[step]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


_DROP = object()


@pytest.mark.parametrize(
    "body",
    [
        _with(("node",), 5),
        _with(("pod_uid",), _DROP),
        _with(("state",), "nonsense"),
        _with(("state",), ["decided"]),
        _with(("init_count",), True),
        _with(("init_count",), "1"),
        _with(("decided_at",), "yesterday"),
        _with(("containers",), "main"),
        _with(("containers",), ["main", 3]),
        _with(("devices",), {"0": []}),
        _with(("devices", 0), "GPU-0"),
        _with(("devices", 0, 0), ["GPU-0"]),
        _with(("devices", 0, 0, "usedmem"), 1.5),
        _with(("devices", 0, 0, "usedcores"), _DROP),
        _with(("devices", 0, 0, "uuid"), None),
        _with(("devices", 0, 0, "usedmem"), -80000),
        _with(("devices", 0, 0, "usedcores"), 1 << 63),
        _with(("devices", 0, 0, "idx"), -1),
        _with(("init_count",), -1),
        _with(("decided_at",), float("nan")),
        _with(("decided_at",), float("inf")),
        _with(("decided_at",), -5.0),
        _with(("expires_at",), (1 << 64) - 1),
        ["not", "a", "map"],
    ],
)
def test_unusual_bodies_are_judged_exactly_as_the_generic_codec_judges_them(body: Any) -> None:
    try:
        expected: Allocation | str = from_wire(Allocation, body)
    except EventDecodeError as e:
        expected = str(e)
    try:
        got: Allocation | str = decode_allocation(msgpack.packb(body))
    except EventDecodeError as e:
        got = str(e)
    assert got == expected


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("devices", 0, 0, "usedmem"), -80000),
        (("devices", 0, 0, "usedcores"), -100),
        (("decided_at",), float("nan")),
        (("expires_at",), float("inf")),
    ],
)
def test_amounts_and_times_out_of_range_are_refused(path: tuple[Any, ...], value: Any) -> None:
    # a negative amount would cancel a real one and make a full card look empty
    with pytest.raises(EventDecodeError, match=r"out of range|not a finite number"):
        decode_allocation(msgpack.packb(_with(path, value)))


def test_an_int_time_is_read_as_a_float_like_the_generic_codec() -> None:
    got = decode_allocation(msgpack.packb(_with(("decided_at",), 7)))
    assert got.decided_at == 7.0 and type(got.decided_at) is float


def test_bytes_that_are_not_msgpack_are_refused() -> None:
    with pytest.raises(EventDecodeError, match="not valid msgpack"):
        decode_allocation(b"\xc1")


def test_encoding_is_plain_to_wire_msgpack() -> None:
    a = from_wire(Allocation, _good())
    assert msgpack.unpackb(encode_allocation(a)) == to_wire(a)


def test_an_entry_under_another_pods_key_is_a_key_mismatch() -> None:
    value = msgpack.packb(_good())
    uid = decode_allocation(value).pod_uid
    assert decode_entry(uid, value).pod_uid == uid
    with pytest.raises(KeyMismatch, match=f"ledger entry stray names pod {uid}"):
        decode_entry("stray", value)
