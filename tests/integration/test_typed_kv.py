"""``read_typed`` against a real nats-server: a bucket's live entries, decoded by one rule.

Cases: the ``inventory`` and ``allocations`` buckets each holding good entries, a body that is
not msgpack, a body that is no entry, one under another's key and a deleted key; the reader returns
the good entries by key, names the bad keys, calls the hook once per bad key and never sees the
deleted one.
"""

from __future__ import annotations

import msgpack
from event_samples import allocation, inventory

from shared.bus import ALLOCATIONS, INVENTORY, Bus, read_typed
from shared.errors import EventDecodeError
from shared.inventory_entries import decode_inventory_entry, encode_inventory
from shared.ledger_entries import KeyMismatch, decode_entry, encode_allocation

GARBAGE = b"\xc1\xc1 not msgpack"


async def test_inventory_bucket_is_read_typed_with_bad_entries_skipped_and_counted(bus: Bus) -> None:
    kv = await bus.kv(INVENTORY)
    await kv.put("n1", encode_inventory(inventory("n1")))
    await kv.put("n2", encode_inventory(inventory("n2")))
    await kv.put("n3", encode_inventory(inventory("n1")))  # names another node than its key
    await kv.put("gone", encode_inventory(inventory("gone")))
    await kv.delete("gone")
    await kv.put("bad", GARBAGE)
    hooked: dict[str, EventDecodeError] = {}

    read = await read_typed(kv, decode_inventory_entry, hooked.__setitem__)

    assert {k: v.node for k, v in read.values.items()} == {"n1": "n1", "n2": "n2"}
    assert sorted(read.skipped) == ["bad", "n3"] == sorted(hooked)
    assert isinstance(hooked["n3"], KeyMismatch) and not isinstance(hooked["bad"], KeyMismatch)


async def test_allocations_bucket_is_read_typed_and_a_clean_one_skips_nothing(bus: Bus) -> None:
    kv = await bus.kv(ALLOCATIONS)
    good = allocation("n1", "u1", 100)
    await kv.put("u1", encode_allocation(good))
    hooked: list[str] = []

    clean = await read_typed(kv, decode_entry, lambda key, error: hooked.append(key))
    await kv.put("u2", msgpack.packb({"pod_uid": 7}))
    dirty = await read_typed(kv, decode_entry, lambda key, error: hooked.append(key))

    assert clean.values == {"u1": good} and clean.skipped == ()
    assert dirty.values == {"u1": good} and dirty.skipped == ("u2",)
    assert hooked == ["u2"]
