"""Typed bulk reads of a KV bucket: its current entries decoded, bad ones skipped by one rule.

The bus half of :mod:`shared.kv_reading`: one snapshot read of the bucket, then every entry
through :func:`shared.kv_reading.decode_all`. Callers pass the entry codec (``decode_entry``,
``decode_inventory_entry``) and their metric hook. Must not know what the entries mean.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from shared.bus.kv import KV
from shared.kv_reading import Decode, Decoded, OnSkip, decode_all

T = TypeVar("T")


async def read_typed(kv: KV, decode: Decode[T], on_skip: OnSkip | None = None, *,
                     keep: Callable[[str], bool] = lambda key: True) -> Decoded[T]:
    """The bucket's live entries decoded; each bad one logged once and passed to ``on_skip``.
    ``keep``: which keys are entries at all (others are neither decoded nor counted).

    Raises ``BusUnavailable`` as :meth:`KV.snapshot` does; decoding never raises."""
    snapshot = await kv.snapshot()
    pairs = ((k, e.value) for k, e in snapshot.entries.items() if keep(k))
    return decode_all(kv.bucket, pairs, decode, on_skip)
