"""The live view, its feed and its checkpoints: stream messages in, views out (pure, no I/O).

:class:`Timeline` decodes each stream message (an undecodable one is counted and shown in the
feed, never raised), folds it into the live :class:`ClusterView`, and keeps a copy of the view
every ``checkpoint_interval_s`` of stream time once it has caught up with the stream. Time
travel starts from :meth:`Timeline.checkpoint_before` (or from an empty view when the moment
is older than every checkpoint) and folds the stream's next events with the same
:func:`absorb`. Must not know NATS or HTTP: the edges hand it :class:`Raw` messages.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable

from services.dashboard.feed import Feed, entry_for, undecodable_entry
from services.dashboard.trends import Trends
from services.dashboard.view import ClusterView
from shared.codec import decode
from shared.errors import EventDecodeError, clip
from shared.events import Inventory
from shared.model import Allocation
from shared.stream_messages import StoredMessage

log = logging.getLogger(__name__)


Raw = StoredMessage
"""One stream message as the bus read it (the timeline folds them)."""


def absorb(view: ClusterView, raw: Raw, feed: Feed | None = None) -> bool:
    """Fold one message into ``view`` (and ``feed``); False when it was no event (counted in the view)."""
    try:
        event = decode(raw.data)
    except EventDecodeError as e:
        view.count_undecodable(raw.seq, raw.at)
        if feed is not None:
            feed.add(undecodable_entry(raw.subject, len(raw.data), clip(str(e), 200), raw.seq, raw.at))
        return False
    view.apply(event, raw.seq, raw.at)
    if feed is not None:
        feed.add(entry_for(event, raw.seq, raw.subject))
    return True


class Timeline:
    """The live view and what time travel starts from."""

    def __init__(self, *, feed_size: int, checkpoint_interval_s: float, checkpoints: int,
                 trend_step_s: float = 10.0, finished_retention_s: float = 86_400.0) -> None:
        self.view = ClusterView(finished_retention_s=finished_retention_s)
        self.feed = Feed(feed_size)
        self.trends = Trends(trend_step_s)
        """Sampled only once caught up: before, the view mixes the buckets' present with the past."""
        self.interval_s = checkpoint_interval_s
        self._checkpoints: deque[ClusterView] = deque(maxlen=max(1, checkpoints))
        self.caught_up = False
        """The live consumer has handed over the stream's backlog (its history window)."""
        self.version = 0
        """Bumped on every change; pushes compare it."""

    def seed(self, inventories: Iterable[Inventory], allocations: Iterable[Allocation], at: float) -> None:
        self.view.seed(inventories, allocations, at)
        self.version += 1

    def mark_caught_up(self) -> None:
        """The backlog is folded in (the consumer has nothing pending): checkpoints start here."""
        if not self.caught_up:
            self.caught_up = True
            self._checkpoints.append(self.view.copy())

    def on_message(self, raw: Raw, pending: int = 0) -> None:
        """Fold a live message; ``pending`` is how many more the consumer's backlog holds."""
        if raw.seq <= self.view.seq:
            return  # a consumer re-created after a reconnect hands over what it already had
        if self.caught_up:
            self.trends.advance(self.view, raw.at)
        absorb(self.view, raw, self.feed)
        self.version += 1
        if not self.caught_up:
            if pending == 0:
                self.mark_caught_up()
        elif raw.at - self._checkpoints[-1].at >= self.interval_s:
            self._checkpoints.append(self.view.copy())

    def checkpoint_before(self, at: float) -> ClusterView | None:
        """A copy of the newest checkpoint at or before ``at``; None when every one is newer."""
        for checkpoint in reversed(self._checkpoints):
            if checkpoint.at <= at:
                return checkpoint.copy()
        return None

    @property
    def checkpoint_times(self) -> list[float]:
        return [c.at for c in self._checkpoints]
