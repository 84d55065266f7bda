"""The codec of inventory entries: :class:`Inventory` <-> msgpack bytes in the KV ``inventory`` bucket.

The node-agent writes a node's full inventory under the node's name (level-triggered, style 11);
the scheduler, the monitor and ``gpubus snapshot`` read it back. Every reader goes through
:func:`decode_inventory_entry`, which also refuses an entry that names another node than its key:
the readers are keyed by node, and such an entry would give one node another's devices.

Must not know NATS, the ledger or any service. Pure.
"""

from __future__ import annotations

from shared.codec import decode_as, pack
from shared.events import Inventory
from shared.ledger_entries import KeyMismatch

__all__ = ["KeyMismatch", "decode_inventory", "decode_inventory_entry", "encode_inventory"]


def encode_inventory(inventory: Inventory) -> bytes:
    return pack(inventory)


def decode_inventory(value: bytes) -> Inventory:
    """Bytes from KV -> Inventory; EventDecodeError when they are not a usable inventory event."""
    return decode_as(Inventory, value, "inventory entry")


def decode_inventory_entry(key: str, value: bytes) -> Inventory:
    """The entry stored under node ``key``; :class:`KeyMismatch` when it names another node."""
    inventory = decode_inventory(value)
    if inventory.node != key:
        raise KeyMismatch(f"inventory entry {key} names node {inventory.node!r}")
    return inventory
