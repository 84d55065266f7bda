"""The kube-scheduler stand-in's queue: FIFO, dedup, in-flight, doubling backoff, flush on events."""

from __future__ import annotations

import asyncio

import pytest

from services.sim.scheduling_queue import BackoffPolicy, SchedulingQueue


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


async def test_failed_pod_returns_after_its_backoff() -> None:
    queue = SchedulingQueue(BackoffPolicy(initial_s=0.01, max_s=0.01))
    queue.add("a")
    await queue.pop()
    assert queue.failed("a") == 0.01
    queue.add("a")  # backing off: ignored
    assert await asyncio.wait_for(queue.pop(), 5) == "a"
    assert queue.attempts("a") == 1


async def test_cluster_event_moves_backing_off_pods_to_active_at_once() -> None:
    queue = SchedulingQueue(BackoffPolicy(initial_s=3600, max_s=3600))
    for key in ("a", "b"):
        queue.add(key)
        await queue.pop()
        queue.failed(key)
    assert queue.move_all_to_active() == 2
    assert [await queue.pop(), await queue.pop()] == ["a", "b"]
    queue.close()


async def test_forget_drops_a_pod_from_every_place() -> None:
    queue = SchedulingQueue(BackoffPolicy(initial_s=3600, max_s=3600))
    queue.add("queued")
    queue.add("backing-off")
    queue.forget("queued")
    assert await queue.pop() == "backing-off"
    queue.failed("backing-off")
    queue.forget("backing-off")
    assert queue.move_all_to_active() == 0 and len(queue) == 0
