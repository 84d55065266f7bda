"""The webhook's link to NATS: connected in the background, never waited for by admission.

``emit`` is safe before the first connection: events wait in a bounded buffer (oldest dropped and
counted) and are handed to the bus, in order, once it is connected; after that the bus's own
outbox carries them through outages. The connect task is named, owned and cancelled on close.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from typing import Protocol

from shared.bus import Bus, BusSettings, BusStats
from shared.errors import BusRefused, GpubusError
from shared.events import Event
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_RETRY_S = 2.0


class EventSink(Protocol):
    """Where the handler sends events; must never block or raise."""

    def emit(self, event: Event) -> None: ...


class BusLink:
    """Owns the webhook's :class:`Bus`; buffers events until it exists."""

    def __init__(self, settings: BusSettings, *, source: str, pending_limit: int | None = None) -> None:
        # Bus.connect keeps retrying while the timeout is 0; NATS may come up long after us.
        self._settings = dataclasses.replace(settings, initial_connect_timeout_s=0.0)
        self._source = source
        self._pending: deque[Event] = deque()
        # Same bound before the first connection as the bus's own outbox after it.
        self._pending_limit = max(1, settings.outbox_limit if pending_limit is None else pending_limit)
        self._dropped_before_connect = 0
        self._bus: Bus | None = None
        self._task: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None
        """Set when the connect task died of a bug (events stay buffered, and dropped past the bound)
        or when NATS refused the bus settings (replicas it cannot place)."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._connect(), name="webhook-bus-connect")
        self._task.add_done_callback(self._connect_done)

    @property
    def connected(self) -> bool:
        return self._bus is not None and self._bus.is_connected

    @property
    def state(self) -> str:
        """``connected``, ``connecting`` or ``failed`` (for /readyz)."""
        if self.failed is not None:
            return "failed"
        return "connected" if self.connected else "connecting"

    @property
    def stats(self) -> BusStats | None:
        """The connected bus's counters; None while connecting."""
        return self._bus.stats if self._bus is not None else None

    @property
    def dropped(self) -> int:
        return self._dropped_before_connect + (self._bus.dropped if self._bus else 0)

    def emit(self, event: Event) -> None:
        if self._bus is not None:
            self._bus.emit(event)
            return
        if len(self._pending) >= self._pending_limit:
            self._pending.popleft()
            self._dropped_before_connect += 1
        self._pending.append(event)

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        if self._bus is not None:
            await self._bus.close()

    def _connect_done(self, task: asyncio.Task[None]) -> None:
        # Admission must go on without NATS, so a dead connect task is loud (log, /readyz) but not fatal.
        if not task.cancelled() and task.exception() is not None:
            self.failed = task.exception()
            log.error("the webhook's NATS connect task died; events are no longer sent", exc_info=self.failed)

    async def _connect(self) -> None:
        while True:
            try:
                bus = await Bus.connect(self._settings, source=self._source)
            except GpubusError as e:
                log.error("cannot connect to NATS (%s); admission goes on, events are buffered", e)
                await asyncio.sleep(_RETRY_S)
                continue
            break
        try:
            await bus.ensure_schema()
        except BusRefused as e:
            # A setting the cluster refuses (replicas it cannot place): loud, and /readyz says failed.
            self.failed = e
            log.error("the NATS settings are refused: %s; admission goes on, events wait in the outbox", e)
        except GpubusError as e:
            log.warning("could not ensure the event stream (%s); the outbox keeps retrying", e)
        while self._pending:
            bus.emit(self._pending.popleft())
        self._bus = bus
