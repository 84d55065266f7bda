"""RFC 3339 times as the Kubernetes components write and read them (pure: callers pass the time).

Three layouts are written, all in UTC:

- ``metav1.Time``, to the second (``2006-01-02T15:04:05Z``): object and condition timestamps, an
  event's first and last times (:func:`format_time`);
- Go's ``time.RFC3339Nano``, the fraction's trailing zeros dropped: CRI log records, as containerd
  writes them (:func:`format_nano`);
- nine fraction digits always: the kubelet's ``timestamps=true`` log prefix (:func:`format_nano_fixed`).

One parser reads any of them back, with any fraction and ``Z`` or an offset, as Go's
``time.Parse(time.RFC3339Nano, ...)`` does (:func:`parse_ns`). Knows nothing of what the times stamp.
"""

from __future__ import annotations

import calendar
import re
import time

NS_PER_S = 1_000_000_000
_PATTERN = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                      r"(?:\.([0-9]{1,9}))?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))")


def _split(time_ns: int) -> tuple[str, int]:
    """The time to the second (without a zone) and the nanoseconds past it."""
    seconds, nanos = divmod(time_ns, NS_PER_S)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)), nanos


def format_time(time_ns: int) -> str:
    """``metav1.Time``: the fraction is cut, as its JSON encoding cuts it."""
    return _split(time_ns)[0] + "Z"


def format_nano(time_ns: int) -> str:
    """Go's ``time.RFC3339Nano``: the fraction's trailing zeros dropped, none at all on a whole second."""
    whole, nanos = _split(time_ns)
    fraction = f"{nanos:09d}".rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else whole + "Z"


def format_nano_fixed(time_ns: int) -> str:
    """Always nine fraction digits, so prefixed log lines line up (the kubelet's ``timestamps=true``)."""
    whole, nanos = _split(time_ns)
    return f"{whole}.{nanos:09d}Z"


def parse_ns(text: str) -> int | None:
    """Unix nanoseconds; None for anything that is not an RFC 3339 time with a zone (a day or zone
    offset out of range included), never an exception: the text comes from clients."""
    m = _PATTERN.fullmatch(text)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    # year 0 is Go's but not Python's calendar; a day past its month's end is refused as Go refuses it
    if not (y >= 1 and 1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1]
            and h < 24 and mi < 60 and s < 60):
        return None
    offset = 0
    if m.group(8) is not None:
        off_h, off_m = int(m.group(9)), int(m.group(10))
        if off_h >= 24 or off_m >= 60:
            return None
        offset = (off_h * 60 + off_m) * 60
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - (offset if m.group(8) == "+" else -offset)
    return seconds * NS_PER_S + int((m.group(7) or "").ljust(9, "0"))
