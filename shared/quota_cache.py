"""Namespace ResourceQuotas read through the Kubernetes port on demand and kept in memory.

The Kubernetes port offers no watch on ResourceQuotas, so a namespace is read when someone asks
about it and its view is older than ``ttl_s`` (or was never read). One read per namespace is in
flight at a time (every asker shares it) and at most ``max_reads`` run at once. Three ways to ask:

- :meth:`QuotaCache.get` never waits: the view as last read (None: never read); a stale or missing
  one is read in the background. The scheduler's /filter.
- :meth:`QuotaCache.ensure` waits for the first read only. The scheduler's /bind: the Fit that
  reserves always sees the quota once it exists.
- :meth:`QuotaCache.fresh` waits while the view is stale. The webhook: admission checks the quota
  as it is now, at most ``ttl_s`` old.

A read that fails or takes longer than ``timeout_s`` is logged and counted (``on_error("read_failed")``);
the last good view stays in force and the namespace is read again after ``error_ttl_s``. A limit that
is not an integer is logged and counted (``"invalid_quantity"``) when the namespace's quota changes.
The readers' own view (``build``) is made once per read, not per question. Every read task is owned
and cancelled by :meth:`close`.

Must not know HTTP, NATS, the ledger or the Fit engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from shared.errors import GpubusError
from shared.kube_types import ResourceQuota
from shared.quota import ParsedQuotas, parse_resource_quotas
from shared.requests import ResourceNames
from shared.tasks import cancel_and_wait

log = logging.getLogger(__name__)

V = TypeVar("V")

READ_FAILED = "read_failed"
INVALID_QUANTITY = "invalid_quantity"


class QuotaSource(Protocol):
    """The one call of ``shared.kube.KubeApi`` the cache needs."""

    async def list_resource_quotas(self, namespace: str) -> list[ResourceQuota]: ...


class QuotaCache(Generic[V]):
    """``namespace -> V``, where ``V`` is what ``build`` makes of the namespace's parsed quotas."""

    def __init__(
        self,
        source: QuotaSource,
        names: ResourceNames,
        build: Callable[[ParsedQuotas], V],
        *,
        ttl_s: float = 10.0,
        error_ttl_s: float = 2.0,
        timeout_s: float = 2.0,
        max_reads: int = 8,
        on_error: Callable[[str], None] = lambda kind: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._names = names
        self._build = build
        self._ttl_s, self._error_ttl_s, self._timeout_s = ttl_s, error_ttl_s, timeout_s
        self._slots = asyncio.Semaphore(max_reads)
        self._on_error = on_error
        self._clock = clock
        self._views: dict[str, V] = {}
        self._parsed: dict[str, ParsedQuotas] = {}
        self._due: dict[str, float] = {}
        """Namespace -> when it is to be read again (absent: never asked about)."""
        self._reads: dict[str, asyncio.Task[None]] = {}

    def get(self, namespace: str) -> V | None:
        """The namespace's view as last read; never waits (a stale or unread one is read meanwhile)."""
        if self._due.get(namespace, -1.0) <= self._clock():
            self._read(namespace)
        return self._views.get(namespace)

    async def ensure(self, namespace: str) -> V | None:
        """The view, waiting (at most ``timeout_s``) for the namespace's first read only."""
        view = self.get(namespace)
        if view is None and namespace in self._reads:
            await asyncio.wait([self._reads[namespace]])
        return self._views.get(namespace)

    async def fresh(self, namespace: str) -> V | None:
        """The view at most ``ttl_s`` old, waiting (at most ``timeout_s``) for a read when it is older.
        None when the namespace's quotas could not be read yet."""
        if self._due.get(namespace, -1.0) <= self._clock():
            await asyncio.wait([self._read(namespace)])
        return self._views.get(namespace)

    def want(self, namespaces: Iterable[str]) -> None:
        """Have these namespaces read now if they never were."""
        for namespace in namespaces:
            if namespace not in self._due:
                self._read(namespace)

    def known(self) -> dict[str, V]:
        """Every namespace read so far with its view as last read (metrics)."""
        return dict(self._views)

    async def close(self) -> None:
        """Cancel the reads in flight and wait for them."""
        await cancel_and_wait(*self._reads.values())
        self._reads.clear()

    def _read(self, namespace: str) -> asyncio.Task[None]:
        task = self._reads.get(namespace)
        if task is None:
            self._due.setdefault(namespace, -1.0)
            task = self._reads[namespace] = asyncio.create_task(
                self._refresh(namespace), name=f"quota-read:{namespace}"
            )
            task.add_done_callback(lambda _: self._reads.pop(namespace, None))
        return task

    async def _refresh(self, namespace: str) -> None:
        try:
            async with asyncio.timeout(self._timeout_s), self._slots:
                items = await self._source.list_resource_quotas(namespace)
        except (GpubusError, TimeoutError, OSError) as e:
            log.warning("cannot read the ResourceQuotas of namespace %s: %s", namespace, e or "timed out")
            self._on_error(READ_FAILED)
            self._due[namespace] = self._clock() + self._error_ttl_s
            return
        parsed = parse_resource_quotas(items, self._names)
        if parsed != self._parsed.get(namespace):
            self._changed(namespace, parsed)
            self._parsed[namespace] = parsed
            self._views[namespace] = self._build(parsed)
        self._due[namespace] = self._clock() + self._ttl_s

    def _changed(self, namespace: str, parsed: ParsedQuotas) -> None:
        for bad in parsed.invalid:
            log.warning("namespace %s: ignoring ResourceQuota entry %s (not an integer)", namespace, bad)
            self._on_error(INVALID_QUANTITY)
        log.info(
            "namespace %s GPU quota: %s",
            namespace,
            ", ".join(f"{q.resource}={q.hard} ({q.quota})" for q in parsed.limits) or "none",
        )
