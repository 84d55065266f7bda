"""The scheduler's hint of who holds each Allocate lease: a change newer than the last one known
replaces it, whatever order the watch and this process's own acquires report them in."""

from __future__ import annotations

from typing import Any, cast

from services.scheduler.leases import AllocLeases
from shared.bus import Bus, Entry

KEY = "alloc.n1.1"


def _leases() -> AllocLeases:
    return AllocLeases(cast(Bus, None), ttl=30.0, owner_alive=lambda owner: True)


async def _watch(leases: AllocLeases, revision: int, owner: str | None) -> None:
    """What the ``alloc.>`` watch delivers: a value, or a delete marker (tombstone callback first)."""
    hooks: Any = leases
    if owner is None:
        hooks._on_tombstone(KEY, revision)
        await hooks._on_key(KEY, None)
    else:
        await hooks._on_key(KEY, Entry(owner.encode(), revision))


async def test_values_and_markers_follow_the_newest_revision() -> None:
    leases = _leases()
    await _watch(leases, 10, "a")
    assert (leases.holder_hint(KEY), leases.freed_at(KEY)) == ("a", None)
    await _watch(leases, 11, None)
    assert (leases.holder_hint(KEY), leases.freed_at(KEY)) == (None, 11)
    await _watch(leases, 12, "b")
    assert (leases.holder_hint(KEY), leases.freed_at(KEY)) == ("b", None)


async def test_a_lagging_watch_never_undoes_a_newer_change() -> None:
    leases = _leases()
    await _watch(leases, 12, "ours")  # as noted by our own acquire, before the watch caught up
    await _watch(leases, 10, "theirs")  # the watch, behind: an older holder
    await _watch(leases, 11, None)  # and its delete
    assert (leases.holder_hint(KEY), leases.freed_at(KEY)) == ("ours", None)
    await _watch(leases, 13, None)
    await _watch(leases, 12, "ours")  # a late echo of a value already deleted
    assert (leases.holder_hint(KEY), leases.freed_at(KEY)) == (None, 13)
