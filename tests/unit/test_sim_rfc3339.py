"""RFC 3339 as the stand-ins write and read it (``gpubus_local.sim.rfc3339``).

Case matrix. Writing, one instant in the three layouts: ``metav1.Time`` cuts the fraction (never
rounds); RFC3339Nano drops the fraction's trailing zeros and the dot on a whole second; the fixed
layout always has nine digits. Each agrees with what the code it replaced wrote (``strftime`` with
``gmtime``, ``datetime.strftime``). Reading: ``Z``/``z``, any fraction of 1-9 digits, offsets east and
west, a ``t`` separator; not a time (no zone, date only, space separator, a fraction of 10 digits,
out-of-range fields) is None. Round trip for the nano layouts.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from gpubus_local.sim import rfc3339

NS = rfc3339.NS_PER_S
T0 = 1_767_225_600 * NS  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(("time_ns", "seconds", "nano", "fixed"), [
    (T0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.000000000Z"),
    (T0 + 999_999_999, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.999999999Z",
     "2026-01-01T00:00:00.999999999Z"),
    (T0 + 120_000_000, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.12Z", "2026-01-01T00:00:00.120000000Z"),
    (T0 - 1, "2025-12-31T23:59:59Z", "2025-12-31T23:59:59.999999999Z", "2025-12-31T23:59:59.999999999Z"),
    (0, "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000000000Z"),
])
def test_one_instant_in_each_layout(time_ns: int, seconds: str, nano: str, fixed: str) -> None:
    assert rfc3339.format_time(time_ns) == seconds
    assert rfc3339.format_nano(time_ns) == nano
    assert rfc3339.format_nano_fixed(time_ns) == fixed
    assert rfc3339.parse_ns(nano) == rfc3339.parse_ns(fixed) == time_ns


def test_the_second_layout_is_what_the_stand_ins_wrote_before() -> None:
    now_ns = time.time_ns()
    assert rfc3339.format_time(now_ns) == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ns // NS))
    at = datetime.fromtimestamp(now_ns // NS, UTC)
    assert rfc3339.format_time(now_ns) == at.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("text", "time_ns"), [
    ("2026-01-01T00:00:00Z", T0),
    ("2026-01-01t00:00:00z", T0),
    ("2026-01-01T00:00:00.5Z", T0 + 500_000_000),
    ("2026-01-01T00:00:00.000001Z", T0 + 1_000),
    ("2026-01-01T02:00:00.25+02:00", T0 + 250_000_000),
    ("2025-12-31T23:00:00-01:00", T0),
    ("2025-12-31T18:30:00-05:30", T0),
])
def test_reads_any_fraction_and_zone(text: str, time_ns: int) -> None:
    assert rfc3339.parse_ns(text) == time_ns


@pytest.mark.parametrize("text", [
    "", "yesterday", "2026-01-01T00:00:00", "2026-01-01", "2026-01-01 00:00:00Z",
    "2026-01-01T00:00:00.1234567890Z", "2026-13-01T00:00:00Z", "2026-01-01T24:00:00Z",
    "2026-01-01T00:60:00Z", "2026-01-01T00:00:00+0200",
    "0000-01-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "2026-01-00T00:00:00Z",
    "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00-02:60",
])
def test_what_is_not_an_rfc3339_time_is_none(text: str) -> None:
    assert rfc3339.parse_ns(text) is None


def test_a_leap_day_is_a_day() -> None:
    leap, next_day = rfc3339.parse_ns("2028-02-29T00:00:00Z"), rfc3339.parse_ns("2028-03-01T00:00:00Z")
    assert leap is not None and next_day is not None
    assert next_day - leap == 86400 * rfc3339.NS_PER_S
