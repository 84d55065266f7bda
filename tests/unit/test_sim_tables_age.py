"""The two duration columns of the server-side Tables read times with one parser.

Case matrix: the AGE column's coarse durations at each unit boundary (a time in the future is
``0s``); AGE (``short_duration``) and the events' LAST SEEN (``human_duration``) read the same
instant the same way whether written to the second, with a fraction or with an offset; a timestamp
that is not RFC 3339 (not its layout, or no such day: year 0, February 31st) is ``<invalid>`` in
both, an absent one ``<unknown>``.
"""

from __future__ import annotations

import time

import pytest

from gpubus_local.sim import rfc3339
from gpubus_local.sim.tables import as_table, short_duration

S = rfc3339.NS_PER_S


@pytest.mark.parametrize(("seconds", "text"), [
    (-30, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (7199, "119m"), (7200, "2h"),
    (48 * 3600 - 1, "47h"), (48 * 3600, "2d"), (400 * 86400, "400d"),
])
def test_age_durations(seconds: int, text: str) -> None:
    assert short_duration(seconds) == text


def ago_layouts(minutes: int) -> list[str]:
    """One instant ``minutes`` and a half ago, as metav1.Time, RFC3339Nano and with a +02:00 offset."""
    then = time.time_ns() - (minutes * 60 + 30) * S
    east = rfc3339.format_nano(then + 2 * 3600 * S).removesuffix("Z") + "+02:00"
    return [rfc3339.format_time(then), rfc3339.format_nano(then + 1), east]


def age(created: object) -> str:
    [row] = as_table("configmaps", [{"metadata": {"name": "c", "creationTimestamp": created}}], "1")["rows"]
    return str(row["cells"][1])


def last_seen(stamp: object) -> str:
    event = {"metadata": {"name": "e"}, "lastTimestamp": stamp, "involvedObject": {}}
    [row] = as_table("events", [event], "1")["rows"]
    return str(row["cells"][0])


def test_age_and_last_seen_read_every_layout_of_one_instant_alike() -> None:
    layouts = ago_layouts(12)
    assert [age(t) for t in layouts] == ["12m"] * 3
    assert [last_seen(t) for t in layouts] == ["12m"] * 3


@pytest.mark.parametrize("stamp", ["yesterday", "2026-01-01T00:00:00", "2026-01-01"])
def test_a_time_that_is_not_rfc3339_is_invalid_in_both(stamp: str) -> None:
    assert (age(stamp), last_seen(stamp)) == ("<invalid>", "<invalid>")


@pytest.mark.parametrize("stamp", ["0000-01-01T00:00:00Z", "2026-02-31T00:00:00Z"])
def test_a_time_of_the_right_layout_but_no_such_day_is_invalid_in_both(stamp: str) -> None:
    """Year 0 and a day past its month's end fit the pattern but are no time: ``<invalid>``, not an error."""
    assert (age(stamp), last_seen(stamp)) == ("<invalid>", "<invalid>")


def test_an_absent_time_is_unknown() -> None:
    assert (age(None), last_seen(None)) == ("<unknown>", "<unknown>")
