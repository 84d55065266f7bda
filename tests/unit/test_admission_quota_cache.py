"""The quota cache in front of the Kubernetes port (a faithful in-test ``QuotaSource``).

Cases: no API configured (not enforced); one read per namespace per TTL; concurrent admissions
share one read; a failing or hanging API gives an "unknown" view and counts the error.
"""

from __future__ import annotations

import asyncio

from services.webhook.quota import NO_QUOTA, QuotaLimit
from services.webhook.quota_cache import UNKNOWN, QuotaCache
from shared.kube import KubeUnavailable
from shared.kube_types import ResourceQuota
from shared.requests import ResourceNames

QUOTA: ResourceQuota = {"metadata": {"name": "q"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}}}


class Quotas:
    """Answers list_resource_quotas like the API server: per namespace, possibly failing or slow."""

    def __init__(self, *, fail: bool = False, gate: asyncio.Event | None = None) -> None:
        self.calls: list[str] = []
        self.fail, self.gate = fail, gate

    async def list_resource_quotas(self, namespace: str) -> list[ResourceQuota]:
        self.calls.append(namespace)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise KubeUnavailable("connection refused")
        return [QUOTA] if namespace == "team-a" else []


async def test_without_an_api_quotas_are_not_enforced() -> None:
    assert await QuotaCache(None, ResourceNames()).view("team-a") is NO_QUOTA


async def test_a_namespace_is_read_once_per_ttl() -> None:
    source = Quotas()
    cache = QuotaCache(source, ResourceNames(), ttl_s=60)
    first = await cache.view("team-a")
    assert first.limits == (QuotaLimit(quota="q", resource="nvidia.com/gpumem", hard=4000),)
    assert await cache.view("team-a") is first
    assert (await cache.view("team-b")).limits == ()
    assert source.calls == ["team-a", "team-b"]


async def test_an_expired_entry_is_read_again() -> None:
    source = Quotas()
    cache = QuotaCache(source, ResourceNames(), ttl_s=0)
    await cache.view("team-a")
    await cache.view("team-a")
    assert source.calls == ["team-a", "team-a"]


async def test_concurrent_admissions_share_one_read() -> None:
    gate = asyncio.Event()
    source = Quotas(gate=gate)
    cache = QuotaCache(source, ResourceNames(), ttl_s=60)
    views = asyncio.gather(*(cache.view("team-a") for _ in range(5)))
    gate.set()
    assert len({id(v) for v in await views}) == 1
    assert source.calls == ["team-a"]


async def test_a_failing_api_gives_an_unknown_view_and_is_counted() -> None:
    errors: list[None] = []
    cache = QuotaCache(Quotas(fail=True), ResourceNames(), on_error=lambda: errors.append(None))
    assert await cache.view("team-a") is UNKNOWN
    assert len(errors) == 1


async def test_a_hanging_api_times_out_into_an_unknown_view() -> None:
    cache = QuotaCache(Quotas(gate=asyncio.Event()), ResourceNames(), timeout_s=0.05)
    assert await cache.view("team-a") is UNKNOWN
