"""The kube-scheduler stand-in's queue: FIFO, dedup, in-flight, doubling backoff, unschedulable pods
retried by a cluster event once their backoff has passed (during it: to backoff), or after the
leftover time with no event; an error retried by backoff alone. Time is a ManualClock: the tests
move it on instead of sleeping, so they take kube-scheduler's own figures (1-10 s, 5 min)."""

from __future__ import annotations

import asyncio

import pytest
from manual_clock import ManualClock

from gpubus_local.sim.scheduling_queue import BackoffPolicy, SchedulingQueue


@pytest.mark.parametrize(("attempts", "delay"),
                         [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)])
def test_backoff_doubles_from_one_second_to_ten(attempts: int, delay: float) -> None:
    assert BackoffPolicy().delay(attempts) == delay


async def test_pop_is_fifo_and_deduplicates() -> None:
    queue = SchedulingQueue()
    for key in ("a", "b", "a", "c"):
        queue.add(key)
    assert [await queue.pop() for _ in range(3)] == ["a", "b", "c"]


async def test_in_flight_pod_is_not_queued_again() -> None:
    queue = SchedulingQueue()
    queue.add("a")
    assert await queue.pop() == "a"
    queue.add("a")
    assert len(queue) == 0
    queue.done("a")
    queue.add("a")
    assert len(queue) == 1


async def test_pod_that_failed_with_an_error_returns_after_its_backoff() -> None:
    clock = ManualClock()
    queue = SchedulingQueue(clock=clock)
    queue.add("a")
    await queue.pop()
    assert queue.failed("a") == 1.0
    queue.add("a")  # backing off: ignored
    clock.advance(0.999)
    assert queue.where("a") == "backoff"
    clock.advance(0.001)
    assert queue.where("a") == "active"
    assert await asyncio.wait_for(queue.pop(), 5) == "a"
    assert queue.attempts("a") == 1


async def failed_unschedulable(queue: SchedulingQueue, *keys: str) -> None:
    for key in keys:
        queue.add(key)
        assert await queue.pop() == key
        queue.failed(key, unschedulable=True)


async def test_unschedulable_pod_waits_for_an_event_not_its_backoff() -> None:
    clock = ManualClock()
    queue = SchedulingQueue(clock=clock)
    await failed_unschedulable(queue, "a")
    clock.advance(60.0)  # six maximal backoffs: a backoff timer would have fired
    assert queue.where("a") == "unschedulable" and clock.pending() == 0
    queue.add("a")  # an update of the waiting pod itself is no event
    assert queue.where("a") == "unschedulable"
    assert queue.move_all_to_active_or_backoff() == 1
    assert await asyncio.wait_for(queue.pop(), 5) == "a"


async def test_events_during_its_backoff_retry_an_unschedulable_pod_once_when_it_ends() -> None:
    clock = ManualClock()
    queue = SchedulingQueue(clock=clock)
    await failed_unschedulable(queue, "a", "b")
    for _ in range(50):  # a busy cluster: an event after every pod that finished
        clock.advance(0.01)
        queue.move_all_to_active_or_backoff()
    assert queue.where("a") == queue.where("b") == "backoff" and clock.pending() == 2
    clock.advance(0.51)  # the one-second backoff is over
    assert queue.where("a") == queue.where("b") == "active"
    assert [await asyncio.wait_for(queue.pop(), 5) for _ in range(2)] == ["a", "b"]
    assert queue.where("a") == queue.where("b") == "in_flight" and len(queue) == 0


async def test_unschedulable_pod_without_events_is_retried_after_the_leftover_time() -> None:
    clock = ManualClock()
    queue = SchedulingQueue(clock=clock)  # kube-scheduler's five minutes
    await failed_unschedulable(queue, "a")
    clock.advance(299.9)
    assert queue.flush_leftover() == 0 and queue.where("a") == "unschedulable"  # not long enough yet
    clock.advance(0.1)
    assert queue.flush_leftover() == 1
    assert await asyncio.wait_for(queue.pop(), 5) == "a"


async def test_forget_drops_a_pod_from_every_place() -> None:
    clock = ManualClock()
    queue = SchedulingQueue(clock=clock)
    queue.add("queued")
    queue.add("backing-off")
    queue.forget("queued")
    assert await queue.pop() == "backing-off"
    queue.failed("backing-off")
    queue.forget("backing-off")
    queue.add("unschedulable")
    assert await queue.pop() == "unschedulable"
    queue.failed("unschedulable", unschedulable=True)
    queue.forget("unschedulable")
    assert queue.move_all_to_active_or_backoff() == 0 and len(queue) == 0
    clock.advance(3600)  # the forgotten backoff's timer was cancelled: nothing comes back
    assert len(queue) == 0 and queue.where("backing-off") is None
