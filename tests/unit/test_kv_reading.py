"""The one decode-and-skip rule for KV entries (:mod:`shared.kv_reading`).

Case matrix: every entry good; one undecodable among good ones; one under another's key
(``KeyMismatch``); every entry bad; no entries; no hook given. For each: the good entries by key,
the bad keys in order, the hook called once per bad key with the codec's own error, one warning
per bad key naming bucket and key, and a decoder error other than EventDecodeError not swallowed.
"""

from __future__ import annotations

import logging

import msgpack
import pytest

from shared.errors import EventDecodeError
from shared.kv_reading import Decoded, decode_all, decode_one
from shared.ledger_entries import KeyMismatch, decode_entry, encode_allocation
from shared.model import Allocation, NodeName, PodUID


def _entry(uid: str, *, named: str | None = None) -> bytes:
    return encode_allocation(Allocation(pod_uid=PodUID(named or uid), namespace="ns", name=uid,
                                        node=NodeName("n1"), devices=(), containers=()))


GARBAGE = b"\xc1\xc1 not msgpack"
NOT_AN_ALLOCATION = msgpack.packb({"pod_uid": 7})

CASES = [
    pytest.param([("a", _entry("a")), ("b", _entry("b"))], ["a", "b"], [], id="all-good"),
    pytest.param([("a", _entry("a")), ("x", GARBAGE), ("b", _entry("b"))], ["a", "b"], ["x"],
                 id="one-undecodable"),
    pytest.param([("a", _entry("a", named="b")), ("b", _entry("b"))], ["b"], ["a"], id="key-mismatch"),
    pytest.param([("x", GARBAGE), ("y", NOT_AN_ALLOCATION)], [], ["x", "y"], id="all-bad"),
    pytest.param([], [], [], id="empty"),
]


@pytest.mark.parametrize(("entries", "good", "bad"), CASES)
def test_good_entries_are_kept_and_each_bad_one_is_skipped_counted_and_logged_once(
    entries: list[tuple[str, bytes]], good: list[str], bad: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    hooked: list[tuple[str, EventDecodeError]] = []
    with caplog.at_level(logging.WARNING, logger="shared.kv_reading"):
        decoded = decode_all("allocations", entries, decode_entry, lambda k, e: hooked.append((k, e)))
    assert list(decoded.values) == good
    assert all(decoded.values[k].pod_uid == k for k in good)
    assert decoded.skipped == tuple(bad)
    assert [k for k, _ in hooked] == bad
    assert all(isinstance(e, EventDecodeError) for _, e in hooked)
    logged = [r.getMessage().split(" skipped:")[0] for r in caplog.records]
    assert logged == [f"allocations entry {k}" for k in bad]


def test_the_hook_sees_the_codecs_own_error_so_a_caller_can_tell_kinds_apart() -> None:
    hooked: list[EventDecodeError] = []
    decode_all("allocations", [("a", _entry("a", named="b")), ("x", GARBAGE)], decode_entry,
               lambda k, e: hooked.append(e))
    assert [isinstance(e, KeyMismatch) for e in hooked] == [True, False]


def test_without_a_hook_bad_entries_are_still_skipped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="shared.kv_reading"):
        assert decode_one("inventory", "x", GARBAGE, decode_entry) is None
        decoded = decode_all("inventory", [("x", GARBAGE)], decode_entry)
    assert decoded == Decoded(values={}, skipped=("x",))
    assert len(caplog.records) == 2


def test_a_decoder_that_fails_otherwise_is_a_bug_and_is_not_swallowed() -> None:
    def broken(key: str, value: bytes) -> int:
        raise ZeroDivisionError(key)

    with pytest.raises(ZeroDivisionError):
        decode_all("allocations", [("a", b"")], broken, lambda k, e: None)
