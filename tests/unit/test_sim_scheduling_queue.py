"""The kube-scheduler stand-in's queue: FIFO, dedup, in-flight, doubling backoff, unschedulable pods
retried by a cluster event once their backoff has passed (during it: to backoff), or after the
leftover time with no event; an error retried by backoff alone."""

from __future__ import annotations

import asyncio

import pytest

from gpubus_sim.scheduling_queue import BackoffPolicy, SchedulingQueue


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
    queue = SchedulingQueue(BackoffPolicy(initial_s=0.01, max_s=0.01))
    queue.add("a")
    await queue.pop()
    assert queue.failed("a") == 0.01
    queue.add("a")  # backing off: ignored
    assert await asyncio.wait_for(queue.pop(), 5) == "a"
    assert queue.attempts("a") == 1


async def failed_unschedulable(queue: SchedulingQueue, *keys: str) -> None:
    for key in keys:
        queue.add(key)
        assert await queue.pop() == key
        queue.failed(key, unschedulable=True)


async def test_unschedulable_pod_waits_for_an_event_not_its_backoff() -> None:
    queue = SchedulingQueue(BackoffPolicy(initial_s=0.0, max_s=0.0))
    await failed_unschedulable(queue, "a")
    await asyncio.sleep(0.05)  # let time pass: a backoff timer (there is none) would have fired
    assert queue.where("a") == "unschedulable"
    queue.add("a")  # an update of the waiting pod itself is no event
    assert queue.where("a") == "unschedulable"
    assert queue.move_all_to_active_or_backoff() == 1
    assert await asyncio.wait_for(queue.pop(), 5) == "a"


async def test_events_during_its_backoff_retry_an_unschedulable_pod_once_when_it_ends() -> None:
    queue = SchedulingQueue(BackoffPolicy(initial_s=0.2, max_s=0.2))
    await failed_unschedulable(queue, "a", "b")
    for _ in range(50):  # a busy cluster: an event after every pod that finished
        queue.move_all_to_active_or_backoff()
    assert queue.where("a") == queue.where("b") == "backoff"
    assert [await asyncio.wait_for(queue.pop(), 5) for _ in range(2)] == ["a", "b"]
    assert queue.where("a") == queue.where("b") == "in_flight" and len(queue) == 0


async def test_unschedulable_pod_without_events_is_retried_after_the_leftover_time() -> None:
    queue = SchedulingQueue(BackoffPolicy(initial_s=0.0, max_s=0.0, max_in_unschedulable_s=0.05))
    await failed_unschedulable(queue, "a")
    assert queue.flush_leftover() == 0 and queue.where("a") == "unschedulable"  # not long enough yet
    await asyncio.sleep(0.06)  # the leftover age is the behaviour under test
    assert queue.flush_leftover() == 1
    assert await asyncio.wait_for(queue.pop(), 5) == "a"


async def test_forget_drops_a_pod_from_every_place() -> None:
    queue = SchedulingQueue(BackoffPolicy(initial_s=3600, max_s=3600))
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
