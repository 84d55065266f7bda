"""Namespace ResourceQuotas for admission, read through the Kubernetes port and cached briefly.

One read per namespace per ``ttl_s`` (concurrent admissions in a namespace share it). A failed or
slow read is counted and gives an "unknown" view for ``error_ttl_s``: admission goes on without
the quota check (the scheduler repeats it) rather than failing pods because the API is slow.
Without a Kubernetes API configured, quotas are not enforced at admission.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from services.webhook.quota import NO_QUOTA, QuotaView
from shared.errors import GpubusError
from shared.kube_types import ResourceQuota
from shared.requests import ResourceNames

log = logging.getLogger(__name__)

UNKNOWN = QuotaView(unknown=True)


class QuotaSource(Protocol):
    """The one call of ``shared.kube.KubeApi`` the webhook needs."""

    async def list_resource_quotas(self, namespace: str) -> list[ResourceQuota]: ...


class QuotaCache:
    """``view(namespace)`` -> the namespace's GPU quota entries, at most ``ttl_s`` old."""

    def __init__(
        self,
        source: QuotaSource | None,
        names: ResourceNames,
        *,
        ttl_s: float = 10.0,
        error_ttl_s: float = 2.0,
        timeout_s: float = 2.0,
        on_error: Callable[[], None] = lambda: None,
    ) -> None:
        self._source = source
        self._names = names
        self._ttl_s, self._error_ttl_s, self._timeout_s = ttl_s, error_ttl_s, timeout_s
        self._on_error = on_error
        self._entries: dict[str, tuple[float, QuotaView]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def view(self, namespace: str) -> QuotaView:
        if self._source is None:
            return NO_QUOTA
        cached = self._fresh(namespace)
        if cached is not None:
            return cached
        async with self._locks.setdefault(namespace, asyncio.Lock()):
            cached = self._fresh(namespace)
            if cached is not None:
                return cached
            view, ttl = await self._read(self._source, namespace)
            self._entries[namespace] = (time.monotonic() + ttl, view)
            return view

    def _fresh(self, namespace: str) -> QuotaView | None:
        entry = self._entries.get(namespace)
        return entry[1] if entry is not None and entry[0] > time.monotonic() else None

    async def _read(self, source: QuotaSource, namespace: str) -> tuple[QuotaView, float]:
        try:
            async with asyncio.timeout(self._timeout_s):
                items = await source.list_resource_quotas(namespace)
        except (GpubusError, TimeoutError, OSError) as e:
            log.warning("cannot read ResourceQuotas of namespace %s: %s", namespace, e)
            self._on_error()
            return UNKNOWN, self._error_ttl_s
        return QuotaView.from_resource_quotas(items, self._names), self._ttl_s
