"""kube-scheduler's scheduling queue, reduced to what the stand-in needs (no I/O, no HTTP).

Three places a pending pod can be, as in ``pkg/scheduler/internal/queue``: ``active`` (FIFO, ready
to be scheduled), ``backoff`` (failed; waiting ``initial * 2**(attempts-1)`` capped at ``max``
before going back to active) and ``in_flight`` (being scheduled or bound; not queued again until
it finishes). ``move_all_to_active`` is the cluster-event flush: when a pod is deleted or
finishes, or a node appears or changes, every backing-off pod is retried at once.

Keys are pod UIDs; the queue holds no pod objects, so the caller always schedules the latest
version it has seen.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class BackoffPolicy:
    initial_s: float = 1.0
    """Delay after the first failed attempt (kube-scheduler's podInitialBackoffSeconds)."""
    max_s: float = 10.0
    """Cap of the doubling delay (podMaxBackoffSeconds)."""

    def delay(self, attempts: int) -> float:
        return float(min(self.initial_s * 2 ** max(attempts - 1, 0), self.max_s))


class SchedulingQueue:
    """Active FIFO + backoff timers + in-flight set, with an awaitable ``pop``."""

    def __init__(self, policy: BackoffPolicy | None = None) -> None:
        self.policy = policy or BackoffPolicy()
        self._active: deque[str] = deque()
        self._queued: set[str] = set()
        self._backoff: dict[str, asyncio.TimerHandle] = {}
        self._in_flight: set[str] = set()
        self._attempts: dict[str, int] = {}
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queued) + len(self._backoff)

    def add(self, key: str) -> None:
        """A pod that needs scheduling; ignored if already queued, backing off or in flight."""
        if key in self._queued or key in self._backoff or key in self._in_flight:
            return
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

    def failed(self, key: str) -> float:
        """Unschedulable or failed to bind: back off, then retry. Returns the delay."""
        self._in_flight.discard(key)
        attempts = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempts
        delay = self.policy.delay(attempts)
        self._cancel_backoff(key)
        loop = asyncio.get_running_loop()
        self._backoff[key] = loop.call_later(delay, self._backoff_expired, key)
        return delay

    def _backoff_expired(self, key: str) -> None:
        if self._backoff.pop(key, None) is not None:
            self._push(key)

    def forget(self, key: str) -> None:
        """The pod is gone, bound elsewhere, or done: drop it from every place."""
        self._in_flight.discard(key)
        self._cancel_backoff(key)
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

    def move_all_to_active(self) -> int:
        """Cluster event: retry every backing-off pod now. Returns how many moved."""
        keys = list(self._backoff)
        for key in keys:
            self._cancel_backoff(key)
            self._push(key)
        return len(keys)

    def attempts(self, key: str) -> int:
        return self._attempts.get(key, 0)

    def close(self) -> None:
        for timer in self._backoff.values():
            timer.cancel()
        self._backoff.clear()
