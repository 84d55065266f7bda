"""The codec of ledger entries: :class:`Allocation` <-> msgpack bytes in the KV ``allocations`` bucket.

Every reader (scheduler, monitor, node-agent) goes through :func:`decode_entry`, which also
refuses an entry that names another pod than its key: the ledger is keyed by pod UID, and such an
entry would replace that pod's own entry in a reader's memory while KV keeps both.

A cold start decodes every entry (100k at scale): msgspec reads the bytes straight into the
model (:func:`shared.codec.decode_as`), with the event codec's rules for every field.

The bucket also holds the scheduler leader's term (:data:`TERM_KEY`): every decision is fenced on
it (docs/services/scheduler.md, "Fencing"). It is not an entry; readers pass :func:`is_entry_key`
to skip it.

Must not know the ledger, NATS or the Fit engine. Pure.
"""

from __future__ import annotations

from shared.codec import decode_as, pack
from shared.errors import EventDecodeError
from shared.model import Allocation

#: The scheduler leader's term, in the ledger's own bucket (and stream): its revision is the term.
#: Pod UIDs never contain a dot, so no pod's entry can take this key.
TERM_KEY = "term.scheduler"


def is_entry_key(key: str) -> bool:
    """Whether ``key`` holds a pod's ledger entry (and not the term)."""
    return key != TERM_KEY


def encode_allocation(allocation: Allocation) -> bytes:
    return pack(allocation)


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
    """Bytes from KV -> Allocation; EventDecodeError saying why when unusable."""
    return decode_as(Allocation, value, "Allocation")
