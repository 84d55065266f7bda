"""Namespace ResourceQuotas kept in memory so that /filter never waits on the API server.

The Kubernetes port offers no watch on ResourceQuotas, so one owned task (:meth:`QuotaCache.run`)
re-reads every namespace it has been asked about every ``ttl_s``, and at once when a namespace
is asked about for the first time. :meth:`QuotaCache.get` (filter) answers from memory only: a
namespace not read yet is not enforced *at filter* and is queued. :meth:`QuotaCache.ensure` (bind)
waits, bounded, for that first read, so the bind-time Fit — the one that reserves — always sees
the quota. A failed read is logged and counted; the last good view stays in force (none yet: not
enforced) and the namespace is retried after ``error_ttl_s``.

Owns the refresh schedule; must not know HTTP, NATS, the ledger or Fit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from services.scheduler.quota import NO_QUOTA, NamespaceQuota, parse_quotas
from shared.errors import GpubusError
from shared.kube_types import ResourceQuota
from shared.requests import ResourceNames

log = logging.getLogger(__name__)


class QuotaSource(Protocol):
    """The one call of ``shared.kube.KubeApi`` this cache needs."""

    async def list_resource_quotas(self, namespace: str) -> list[ResourceQuota]: ...


class QuotaCache:
    """``get(namespace)`` from memory; ``run()`` (an owned task) keeps it fresh."""

    def __init__(
        self,
        source: QuotaSource,
        names: ResourceNames,
        *,
        ttl_s: float = 10.0,
        error_ttl_s: float = 2.0,
        timeout_s: float = 2.0,
        on_error: Callable[[str], None] = lambda kind: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._names = names
        self._ttl_s, self._error_ttl_s, self._timeout_s = ttl_s, error_ttl_s, timeout_s
        self._on_error = on_error
        self._clock = clock
        self._views: dict[str, NamespaceQuota] = {}
        self._due: dict[str, float] = {}
        self._read_once: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()

    def get(self, namespace: str) -> NamespaceQuota:
        """The namespace's quota as last read; never waits (an unknown namespace is queued)."""
        view = self._views.get(namespace)
        if view is None:
            self.want((namespace,))
            return NO_QUOTA
        return view

    def want(self, namespaces: Iterable[str]) -> None:
        """Have these namespaces read now if they never were (and kept fresh from then on)."""
        for ns in namespaces:
            if ns not in self._due:
                self._due[ns] = -float("inf")
                self._read_once.setdefault(ns, asyncio.Event())
                self._wake.set()

    async def ensure(self, namespace: str) -> NamespaceQuota:
        """The namespace's quota, waiting (at most ``timeout_s``) for its first read."""
        if namespace not in self._views:
            self.want((namespace,))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._timeout_s):
                    await self._read_once[namespace].wait()
        return self._views.get(namespace, NO_QUOTA)

    def known(self) -> dict[str, NamespaceQuota]:
        """Every namespace read so far with its quota (metrics)."""
        return dict(self._views)

    async def run(self) -> None:
        """Refresh due namespaces forever (orchestration); one read at a time, in the background."""
        while True:
            self._wake.clear()
            now = self._clock()
            for ns in [ns for ns, at in self._due.items() if at <= now]:
                await self._refresh(ns)
            wait = min(self._due.values(), default=math.inf) - self._clock()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(None if math.isinf(wait) else wait):
                        await self._wake.wait()

    async def _refresh(self, namespace: str) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                items = await self._source.list_resource_quotas(namespace)
        except (GpubusError, TimeoutError, OSError) as e:
            log.warning("cannot read the ResourceQuotas of namespace %s: %s", namespace, e)
            self._on_error("read_failed")
            self._due[namespace] = self._clock() + self._error_ttl_s
        else:
            view = parse_quotas(items, self._names)
            if view != self._views.get(namespace):
                self._changed(namespace, view)
            self._views[namespace] = view
            self._due[namespace] = self._clock() + self._ttl_s
        self._read_once[namespace].set()

    def _changed(self, namespace: str, view: NamespaceQuota) -> None:
        for bad in view.invalid:
            log.warning("namespace %s: ignoring ResourceQuota entry %s (not an integer)", namespace, bad)
            self._on_error("invalid_quantity")
        log.info(
            "namespace %s GPU quota: %s",
            namespace,
            ", ".join(f"{q.resource}={q.hard} ({q.quota})" for q in view.limits()) or "none",
        )
