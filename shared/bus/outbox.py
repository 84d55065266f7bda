"""The emit outbox: a bounded in-memory queue drained in order by one owned task.

``emit`` must never block or raise, so events wait here while NATS is away and go out, in
order, when it returns. When the queue is full the oldest event is dropped and counted:
events are level-triggered snapshots or facts whose newest copy matters most. An event NATS
can never store (``EventRefused``) is dropped at once, so it cannot hold up the ones behind it.
A caller that must know its event is stored, and stored after everything emitted before it (a
decision after the release that freed its capacity), passes a future that the sender settles.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from shared.bus.errors import EventRefused
from shared.bus.stats import BusStats
from shared.errors import BusUnavailable
from shared.events import Event
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 1.0
"""Short enough that events flow again within a second of a stream electing its new leader."""
#: Publishes in flight at once: pipelining multiplies throughput, order is kept by the connection.
_WINDOW = 64


class _Outcome(enum.Enum):
    SENT = enum.auto()
    RETRY = enum.auto()
    """NATS is away: send it again, and everything after it."""
    REFUSED = enum.auto()
    """NATS can never store it: dropped, never resent."""


class Outbox:
    """FIFO of events with one sender task; ``publish`` is the bus's acknowledged publish."""

    def __init__(self, publish: Callable[[Event], Awaitable[None]], limit: int, stats: BusStats) -> None:
        self._publish = publish
        self._queue: deque[Event] = deque()
        self._acks: dict[int, asyncio.Future[None]] = {}
        """id(event) -> the future of a caller waiting for that event's acknowledgment."""
        self._limit = max(1, limit)
        self._stats = stats
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task = asyncio.create_task(self._run(), name="bus-outbox")

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, event: Event, ack: asyncio.Future[None] | None = None) -> None:
        """Queue ``event``; ``ack`` (if given) is settled when it is acknowledged or dropped."""
        if len(self._queue) >= self._limit:
            dropped = self._queue.popleft()
            self._stats.dropped += 1
            log.warning("outbox full (%d): dropped %s %s", self._limit, dropped.KIND, dropped.id)
            self._settle(dropped, BusUnavailable(f"outbox full: {dropped.KIND} {dropped.id} dropped"))
        self._queue.append(event)
        if ack is not None:
            self._acks[id(event)] = ack
        self._idle.clear()
        self._wakeup.set()

    async def flush(self, within_s: float) -> bool:
        """Wait until everything queued so far is sent; False if ``within_s`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), within_s)
        except TimeoutError:
            return False
        return True

    async def close(self, within_s: float) -> None:
        """Send what is left (best effort, bounded by ``within_s``), then stop the sender."""
        if not await self.flush(within_s) and self._queue:
            log.warning("outbox closed with %d unsent events", len(self._queue))
        await cancel_and_wait(self._task)
        for event in self._queue:
            self._settle(event, BusUnavailable(f"bus closed before {event.KIND} {event.id} was sent"))

    async def _run(self) -> None:
        backoff = _BACKOFF_MIN_S
        while True:
            if not self._queue:
                self._idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            window = list(itertools.islice(self._queue, _WINDOW))
            outcomes = await asyncio.gather(*(self._send(e) for e in window))
            done = len(list(itertools.takewhile(lambda o: o is not _Outcome.RETRY, outcomes)))
            self._pop_sent(window[:done])
            later = zip(window[done:], outcomes[done:], strict=True)
            self._forget([e for e, o in later if o is _Outcome.REFUSED])
            if done < len(window):
                # Resend from the first failure; Nats-Msg-Id dedup drops any later ones that landed.
                self._stats.retries += 1
                log.debug("outbox: NATS unavailable; retry in %.2fs (%d queued)", backoff, len(self._queue))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
            else:
                backoff = _BACKOFF_MIN_S

    async def _send(self, event: Event) -> _Outcome:
        try:
            await self._publish(event)
        except BusUnavailable:
            return _Outcome.RETRY
        except EventRefused as e:  # the publisher logged and counted it
            self._settle(event, e)
            return _Outcome.REFUSED
        except Exception as e:
            # Unforeseen, but it must not block the events behind it either.
            log.exception("outbox: dropping %s %s that cannot be published", event.KIND, event.id)
            self._stats.refused += 1
            self._settle(event, e)
            return _Outcome.REFUSED
        return _Outcome.SENT

    def _forget(self, refused: list[Event]) -> None:
        """Take refused events out wherever they wait (behind a failure too): a resend cannot help."""
        if refused:
            gone = {id(e) for e in refused}
            self._queue = deque(e for e in self._queue if id(e) not in gone)

    def _pop_sent(self, sent: list[Event]) -> None:
        for event in sent:
            # put() may have dropped it from the head while it was in flight.
            if self._queue and self._queue[0] is event:
                self._queue.popleft()
            self._settle(event, None)  # a no-op for a refused one: settled with its error already

    def _settle(self, event: Event, error: BaseException | None) -> None:
        ack = self._acks.pop(id(event), None)
        if ack is None or ack.done():
            return
        if error is None:
            ack.set_result(None)
        else:
            ack.set_exception(error)
