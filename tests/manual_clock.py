"""A clock that moves only when a test says so, for code that takes one instead of reading the loop's.

``time()`` and ``call_later()`` as on an event loop; :meth:`ManualClock.advance` moves time forward
and runs, in time order, the callbacks that came due. A test then says "ten minutes pass" in no
time at all, and what a timer would have done is exactly what happens.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class ManualTimer:
    when: float
    seq: int
    callback: Callable[[], object] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._timers: list[ManualTimer] = []
        self._seq = itertools.count()

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], object]) -> ManualTimer:
        timer = ManualTimer(self.now + max(delay, 0.0), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move time ``seconds`` on, running each timer that comes due at its own time."""
        target = self.now + seconds
        while self._timers and self._timers[0].when <= target:
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self.now = timer.when
                timer.callback()
        self.now = target

    def pending(self) -> int:
        """Timers not yet run nor cancelled."""
        return sum(1 for t in self._timers if not t.cancelled)
