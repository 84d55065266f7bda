"""One node's monitor: collect from its sources, account, decide what to publish, keep stats.

Synchronous and free of network I/O: events leave through the ``emit`` callable it is given
(:meth:`shared.bus.Bus.emit`, which never blocks), ledger changes arrive through
:meth:`Monitor.on_event`. A process may hold many monitors (one per simulated node); the
composition root (:mod:`services.monitor.app`) drives their cycles and wires the bus.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.monitor import accounting
from services.monitor.accounting import NodeView, SliceKey
from services.monitor.cleanup import CleanupResult, remove_stale
from services.monitor.errors import SourceUnavailable
from services.monitor.ledger import Ledger
from services.monitor.readings import Defect, DefectReason, SourceReading, UsageSource, screen
from shared.events import AllocationDecided, AllocationReleased, Event, Inventory

log = logging.getLogger(__name__)


@dataclass(slots=True)
class MonitorStats:
    """Counters and last-cycle gauges of one node's monitor (rendered by the metrics collector)."""

    cycles: int = 0
    samples: Counter[str] = field(default_factory=Counter)
    """Container readings accepted, per source."""
    source_failures: Counter[str] = field(default_factory=Counter)
    source_up: dict[str, bool] = field(default_factory=dict)
    decode_errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Skipped inputs, per (source, reason)."""
    usage_events: int = 0
    over_limit_events: int = 0
    cache_dirs_removed: int = 0
    cleanup_errors: int = 0
    unattributed: int = 0
    last_cycle_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorOptions:
    publish_interval_s: float = 15.0
    """Least time between two ``usage.sample`` publications of this node, seconds."""
    max_containers_per_event: int = 256
    cleanup_grace_s: float = 300.0
    containers_dir: Path | None = None
    """HAMi-core's ``<hook path>/containers`` to clean up; None disables cleanup."""


class Monitor:
    """The monitor of one node."""

    def __init__(
        self,
        node: str,
        sources: Sequence[UsageSource],
        emit: Callable[[Event], None],
        options: MonitorOptions | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.sources = tuple(sources)
        self.emit = emit
        self.options = options or MonitorOptions()
        self.clock = clock
        self.ledger = Ledger(node)
        self.stats = MonitorStats()
        self.view = NodeView(node=node, at=0.0)
        self._over: frozenset[SliceKey] = frozenset()
        self._last_publish = float("-inf")
        self._defects_logged: dict[str, dict[str, DefectReason]] = {}

    @property
    def ledger_size(self) -> int:
        return len(self.ledger)

    @property
    def ledger_bad_limits(self) -> int:
        return self.ledger.bad_limits

    # -- ledger ---------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """Apply a ledger or inventory event (events of other nodes are ignored)."""
        if isinstance(event, AllocationDecided):
            self.ledger.apply(event.allocation)
        elif isinstance(event, AllocationReleased):
            self.ledger.release(event.pod_uid)
        elif isinstance(event, Inventory) and event.node == self.node:
            self.ledger.devices = event.devices

    # -- cycle ----------------------------------------------------------------------------
    def cycle(self, now: float | None = None) -> NodeView:
        """Collect from every source, account, emit crossings (and usage when due)."""
        started = time.perf_counter()
        now = self.clock() if now is None else now
        readings = [(s.name, r) for s in self.sources if (r := self._collect(s, now)) is not None]
        view = accounting.merge(self.node, now, readings, self.ledger)
        self._over, crossed = accounting.crossings(self._over, view)
        for event in accounting.over_limit_events(view, crossed):
            log.warning(
                "container over its memory limit: %s/%s %s on %s: %d > %d bytes",
                event.namespace,
                event.pod,
                event.container,
                event.uuid,
                event.used_bytes,
                event.limit_bytes,
            )
            self.emit(event)
            self.stats.over_limit_events += 1
        if now - self._last_publish >= self.options.publish_interval_s:
            self._last_publish = now
            for usage in accounting.usage_events(view, self.options.max_containers_per_event):
                self.emit(usage)
                self.stats.usage_events += 1
        self.view = view
        self.stats.cycles += 1
        self.stats.unattributed = sum(r.unattributed for _, r in readings)
        self.stats.last_cycle_s = time.perf_counter() - started
        return view

    def _collect(self, source: UsageSource, now: float) -> SourceReading | None:
        try:
            reading = screen(source.collect(self.ledger, now))
        except SourceUnavailable as e:
            self._source_failed(source.name, str(e))
            return None
        except Exception as e:  # a source bug must cost one source one cycle, not the monitor
            log.exception("usage source %s crashed", source.name)
            self._source_failed(source.name, f"{type(e).__name__}: {e}")
            return None
        if not self.stats.source_up.get(source.name, True):
            log.info("usage source %s on %s is back", source.name, self.node)
        self.stats.source_up[source.name] = True
        self.stats.samples[source.name] += len(reading.containers)
        self._note_defects(source.name, reading.defects)
        return reading

    def _source_failed(self, name: str, why: str) -> None:
        if self.stats.source_up.get(name, True):
            log.warning("usage source %s on %s failed: %s", name, self.node, why)
        self.stats.source_up[name] = False
        self.stats.source_failures[name] += 1

    def _note_defects(self, source: str, defects: tuple[Defect, ...]) -> None:
        """Count every skipped read; log a file only when it first goes bad (or its reason changes)."""
        logged = self._defects_logged.get(source, {})
        seen: dict[str, DefectReason] = {}
        for d in defects:
            self.stats.decode_errors[(source, d.reason.value)] += 1
            seen[d.where] = d.reason
            if logged.get(d.where) != d.reason:
                log.warning("skipping %s (%s): %s", d.where, d.reason.value, d.detail)
        self._defects_logged[source] = seen

    # -- cleanup --------------------------------------------------------------------------
    def cleanup(self, now: float | None = None) -> CleanupResult:
        """Remove cache dirs of pods gone from the ledger; does nothing until the ledger is synced."""
        containers_dir = self.options.containers_dir
        if containers_dir is None or not self.ledger.synced:
            return CleanupResult()
        now = self.clock() if now is None else now
        result = remove_stale(containers_dir, self.ledger.pod_uids(), now, self.options.cleanup_grace_s)
        self.stats.cache_dirs_removed += len(result.removed)
        self.stats.cleanup_errors += result.errors
        return result

    def close(self) -> None:
        for source in self.sources:
            try:
                source.close()
            except Exception:
                log.exception("closing usage source %s", source.name)
