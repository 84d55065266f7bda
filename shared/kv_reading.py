"""The one decode-and-skip rule for KV entries: decode each, log and count each bad one once.

Every reader of the ``inventory`` and ``allocations`` buckets (scheduler, monitor, node-agent,
dashboard, ``gpubus snapshot``) decodes through here, so an entry that cannot be decoded, or one
stored under another's key, is treated alike everywhere: skipped, logged once as a warning, and
handed to the caller's ``on_skip`` hook, which feeds that caller's own metric (each service keeps
its metric names). The ``locks`` bucket holds plain owner strings that never fail to decode, so its
readers need no rule.

Must not know NATS or what the entries mean. Pure but for the warning it logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.errors import EventDecodeError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``decode(key, value)``: the entry stored under ``key`` (never None), or EventDecodeError saying why not.
Decode = Callable[[str, bytes], T]
#: ``on_skip(key, error)``: called once per skipped entry, to count it in the caller's metric.
OnSkip = Callable[[str, EventDecodeError], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decoded(Generic[T]):
    """A bucket's entries that decoded, by key, and the keys of those skipped."""

    values: dict[str, T]
    skipped: tuple[str, ...]


def decode_one(bucket: str, key: str, value: bytes, decode: Decode[T],
               on_skip: OnSkip | None = None) -> T | None:
    """The entry under ``key``; None when ``decode`` refuses it (logged once, then ``on_skip``;
    a reader that keeps no metric, such as a one-shot CLI, passes none)."""
    try:
        return decode(key, value)
    except EventDecodeError as e:
        log.warning("%s entry %s skipped: %s", bucket, key, e)
        if on_skip is not None:
            on_skip(key, e)
        return None


def decode_all(bucket: str, entries: Iterable[tuple[str, bytes]], decode: Decode[T],
               on_skip: OnSkip | None = None) -> Decoded[T]:
    """Every entry through :func:`decode_one`: the good ones by key, the bad ones' keys in order."""
    values: dict[str, T] = {}
    skipped: list[str] = []
    for key, value in entries:
        decoded = decode_one(bucket, key, value, decode, on_skip)
        if decoded is None:
            skipped.append(key)
        else:
            values[key] = decoded
    return Decoded(values=values, skipped=tuple(skipped))
