"""The bus's typed reader of the ``GPUBUS`` stream (:mod:`shared.bus.stream`), on a real server.

Cases: the bounds of an empty stream and of one with messages; a replay hands over what was stored
after a sequence and up to a time, in order; a follower from a time says whether anything is
stored from then on and hands over what follows, with how many are still pending.
"""

from __future__ import annotations

import time

from asyncwait import wait_until

from shared.bus import Bus, stream
from shared.stream_messages import StoredMessage

SUBJECT = "gpubus.usage.report.stream-test"


async def test_an_empty_stream_has_no_first_time(bus: Bus) -> None:
    bounds = await stream.bounds(bus)  # purged by the fixture: empty, its sequence kept
    assert (bounds.messages, bounds.first_at) == (0, 0.0)


async def test_the_bounds_name_the_first_stored_time_and_the_last_sequence(bus: Bus) -> None:
    before = time.time()
    for body in (b"1", b"2"):
        await bus.js.publish(SUBJECT, body)
    bounds = await stream.bounds(bus)
    assert bounds.messages == 2 and bounds.last_seq >= 2
    assert before - 5 <= bounds.first_at <= time.time() + 5  # server and test share a clock


async def test_a_replay_hands_over_what_was_stored_after_a_sequence(bus: Bus) -> None:
    for body in (b"1", b"2", b"3"):
        await bus.js.publish(SUBJECT, body)
    first = (await stream.bounds(bus)).last_seq - 2
    got: list[StoredMessage] = []
    count = await stream.replay(bus, start=None, after_seq=first, until=time.time() + 60,
                                on_message=got.append, timeout=10.0)
    assert count == 2 and [m.data for m in got] == [b"2", b"3"]
    assert [m.seq for m in got] == [first + 1, first + 2] and {m.subject for m in got} == {SUBJECT}


async def test_a_follower_from_a_time_hands_over_what_follows(bus: Bus) -> None:
    got: list[tuple[bytes, int]] = []
    follower = stream.Follower(bus, lambda message, pending: got.append((message.data, pending)))
    try:
        assert await follower.start(time.time() - 60) is True  # nothing stored from then on
        await bus.js.publish(SUBJECT, b"live")
        await wait_until(lambda: got == [(b"live", 0)], what="the live message")
    finally:
        await follower.stop()
