"""kube-scheduler's scheduling queue, reduced to what the stand-in needs (no I/O, no HTTP).

The places a pending pod can be, as in ``pkg/scheduler/internal/queue``: ``active`` (FIFO, ready
to be scheduled), ``backoff`` (waiting until ``initial * 2**(attempts-1)``, capped at ``max``,
has passed since its last attempt, then active), ``unschedulable`` (found no node: waits for a
cluster event) and ``in_flight`` (being scheduled or bound; not queued again until it finishes).
A pod that failed with an error backs off and is retried. A pod that was unschedulable is retried
only after a cluster event (a pod deleted or finished, a node added or changed:
``move_all_to_active_or_backoff``), to active if its backoff has passed, else to backoff; or, with
no event, after ``max_in_unschedulable_s`` (``flush_leftover``). So in a busy cluster, where some
pod finishes every few milliseconds, each unschedulable pod is retried at most once per backoff,
as in kube-scheduler, not at every event.

Keys are pod UIDs; the queue holds no pod objects, so the caller always schedules the latest
version it has seen. Time and timers come from a :class:`Clock` (the running loop's by default), so
tests move time on instead of sleeping through backoffs.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Where the queue reads the time and sets its backoff timers."""

    def time(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer: ...


class LoopClock:
    """The running event loop's monotonic clock and timers."""

    def time(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


@dataclass(frozen=True, slots=True, kw_only=True)
class BackoffPolicy:
    initial_s: float = 1.0
    """Delay after the first failed attempt (kube-scheduler's podInitialBackoffSeconds)."""
    max_s: float = 10.0
    """Cap of the doubling delay (podMaxBackoffSeconds)."""
    max_in_unschedulable_s: float = 300.0
    """An unschedulable pod no event retried is retried after this (podMaxInUnschedulablePodsDuration)."""
    leftover_check_s: float = 30.0
    """How often :meth:`SchedulingQueue.flush_leftover` should run (kube-scheduler: every 30 s)."""

    def delay(self, attempts: int) -> float:
        return float(min(self.initial_s * 2 ** max(attempts - 1, 0), self.max_s))


class SchedulingQueue:
    """Active FIFO + backoff timers + unschedulable pods + in-flight set, with an awaitable ``pop``."""

    def __init__(self, policy: BackoffPolicy | None = None, *, clock: Clock | None = None) -> None:
        self.policy = policy or BackoffPolicy()
        self._clock = clock or LoopClock()
        self._active: deque[str] = deque()
        self._queued: set[str] = set()
        self._backoff: dict[str, Timer] = {}
        self._unschedulable: dict[str, tuple[float, float]] = {}
        """key -> (clock time its backoff ends, clock time it became unschedulable)."""
        self._in_flight: set[str] = set()
        self._attempts: dict[str, int] = {}
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queued) + len(self._backoff) + len(self._unschedulable)

    def add(self, key: str) -> None:
        """A pod that needs scheduling; ignored if queued, backing off, unschedulable or in flight
        (an update of a pod that waits, such as its own PodScheduled condition, is not an event)."""
        if self.where(key) is None:
            self._push(key)

    def _push(self, key: str) -> None:
        self._queued.add(key)
        self._active.append(key)
        self._ready.set()

    async def pop(self) -> str:
        """The next key to schedule; it is in flight until ``done``/``failed``/``forget``."""
        while not self._active:
            self._ready.clear()
            await self._ready.wait()
        key = self._active.popleft()
        self._queued.discard(key)
        self._in_flight.add(key)
        return key

    def done(self, key: str) -> None:
        """Scheduled and bound: forget it entirely."""
        self.forget(key)

    def failed(self, key: str, *, unschedulable: bool = False) -> float:
        """An error (back off, then retry) or no node found (``unschedulable``: wait for a cluster
        event, at the earliest when the backoff ends). Returns the backoff delay."""
        self._in_flight.discard(key)
        attempts = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempts
        delay = self.policy.delay(attempts)
        self._cancel_backoff(key)
        now = self._clock.time()
        if unschedulable:
            self._unschedulable[key] = (now + delay, now)
        else:
            self._back_off(key, delay)
        return delay

    def _back_off(self, key: str, delay: float) -> None:
        self._backoff[key] = self._clock.call_later(delay, functools.partial(self._backoff_expired, key))

    def _backoff_expired(self, key: str) -> None:
        if self._backoff.pop(key, None) is not None:
            self._push(key)

    def forget(self, key: str) -> None:
        """The pod is gone, bound elsewhere, or done: drop it from every place."""
        self._in_flight.discard(key)
        self._cancel_backoff(key)
        self._unschedulable.pop(key, None)
        self._attempts.pop(key, None)
        if key in self._queued:
            self._queued.discard(key)
            self._active.remove(key)

    def release(self, key: str) -> None:
        """In flight no longer (without a verdict): e.g. the pod vanished mid-cycle."""
        self._in_flight.discard(key)

    def _cancel_backoff(self, key: str) -> None:
        timer = self._backoff.pop(key, None)
        if timer is not None:
            timer.cancel()

    def updated(self, key: str) -> bool:
        """The pod itself changed (not only its status): an unschedulable pod moves as by a cluster
        event (kube-scheduler's UnscheduledPodUpdate); True if it moved."""
        if key not in self._unschedulable:
            return False
        self._move([key])
        return True

    def move_all_to_active_or_backoff(self) -> int:
        """Cluster event: every unschedulable pod to active, or to backoff until its backoff ends.
        Returns how many moved."""
        return self._move([*self._unschedulable])

    def flush_leftover(self) -> int:
        """Unschedulable pods no event retried for ``max_in_unschedulable_s``: moved as by an event."""
        now = self._clock.time()
        return self._move([key for key, (_, since) in self._unschedulable.items()
                           if now - since >= self.policy.max_in_unschedulable_s])

    def _move(self, keys: list[str]) -> int:
        now = self._clock.time()
        for key in keys:
            backoff_ends, _ = self._unschedulable.pop(key)
            if backoff_ends <= now:
                self._push(key)
            else:
                self._back_off(key, backoff_ends - now)
        return len(keys)

    def where(self, key: str) -> str | None:
        """``active``, ``backoff``, ``unschedulable``, ``in_flight`` or None (not queued)."""
        if key in self._queued:  # a plain chain: add() asks this on every pod event
            return "active"
        if key in self._backoff:
            return "backoff"
        if key in self._unschedulable:
            return "unschedulable"
        return "in_flight" if key in self._in_flight else None

    def attempts(self, key: str) -> int:
        return self._attempts.get(key, 0)

    def close(self) -> None:
        for timer in self._backoff.values():
            timer.cancel()
        self._backoff.clear()
        self._unschedulable.clear()
