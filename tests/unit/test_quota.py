"""ResourceQuota objects -> their GPU entries (shared by the webhook and the scheduler), and the cache
in front of the API that both read them through.

Parsing cases: memory and cores ``limits.`` keys of every object, in order; ``requests.``, other
resources and other prefixes ignored; configured names; ``status.used`` read (absent or bad: 0);
a non-integer limit listed as invalid, never raised; malformed objects skipped.
Cache cases: ``get`` never waits and starts a read; ``ensure`` waits for the first read only;
``fresh`` waits while stale and re-reads after ``ttl_s``; concurrent askers share one read; a failing
or hanging API is counted, keeps the last good view, and is retried after ``error_ttl_s``; bad limits
are counted once per change; ``close`` cancels a read in flight.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asyncwait import wait_until

from shared.errors import GpubusError
from shared.kube_types import ResourceQuota
from shared.quota import ParsedQuotas, QuotaLimit, parse_resource_quotas
from shared.quota_cache import INVALID_QUANTITY, READ_FAILED, QuotaCache
from shared.requests import DEFAULT_NAMES, ResourceNames

MEM, CORES = "nvidia.com/gpumem", "nvidia.com/gpucores"


def quota(name: str, hard: dict[str, object], used: dict[str, object] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name}, "spec": {"hard": hard}}
    if used is not None:
        body["status"] = {"used": used}
    return body


# --- parsing --------------------------------------------------------------------------------


def test_every_objects_gpu_limits_are_read_in_order_and_other_keys_ignored() -> None:
    items = [
        quota("a", {f"limits.{MEM}": "8000", f"limits.{CORES}": 200, f"requests.{MEM}": 1, "cpu": "4",
                    "limits.nvidia.com/gpu": 4, f"limits.{MEM}-percentage": 5}),
        quota("b", {f"limits.{MEM}": "3k"}, used={f"limits.{MEM}": "1000"}),
    ]
    assert parse_resource_quotas(items, DEFAULT_NAMES) == ParsedQuotas(
        limits=(
            QuotaLimit(quota="a", resource=MEM, hard=8000),
            QuotaLimit(quota="a", resource=CORES, hard=200),
            QuotaLimit(quota="b", resource=MEM, hard=3000, used=1000),
        )
    )


def test_configured_resource_names_are_the_ones_read() -> None:
    names = ResourceNames(memory="example.com/vmem", cores="example.com/vcores")
    items = [quota("q", {f"limits.{MEM}": "100", "limits.example.com/vmem": "7"})]
    vmem = QuotaLimit(quota="q", resource="example.com/vmem", hard=7)
    assert parse_resource_quotas(items, names).limits == (vmem,)


@pytest.mark.parametrize("bad", ["lots", "1.5", True, None, [], "-"])
def test_a_limit_that_is_not_an_integer_is_listed_not_raised(bad: object) -> None:
    items = [quota("broken", {f"limits.{MEM}": bad}), {"spec": "nonsense"}, {"metadata": 3}]
    expected = ParsedQuotas(invalid=(f"broken: limits.{MEM}={bad!r}",))
    assert parse_resource_quotas(items, DEFAULT_NAMES) == expected


@pytest.mark.parametrize("used", [None, "junk", {}])
def test_a_missing_or_bad_used_reads_as_zero(used: object) -> None:
    items = [quota("q", {f"limits.{MEM}": "10"}, used={f"limits.{MEM}": used})]
    assert parse_resource_quotas(items, DEFAULT_NAMES).limits[0].used == 0


# --- the cache ------------------------------------------------------------------------------


class FakeQuotas:
    """A faithful ``QuotaSource``: serves what the test set, or fails like the adapter does."""

    def __init__(self) -> None:
        self.items: dict[str, list[ResourceQuota]] = {}
        self.failing = False
        self.reads: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def list_resource_quotas(self, namespace: str) -> list[ResourceQuota]:
        self.reads.append(namespace)
        await self.gate.wait()
        if self.failing:
            raise GpubusError("list resourcequotas: connection refused")
        return list(self.items.get(namespace, []))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def limits_of(parsed: ParsedQuotas) -> tuple[QuotaLimit, ...]:
    return parsed.limits


def cache_of(source: FakeQuotas, clock: Clock, errors: list[str] | None = None, **kw: Any) -> QuotaCache[Any]:
    on_error = (errors if errors is not None else []).append
    return QuotaCache(source, DEFAULT_NAMES, limits_of, clock=clock, on_error=on_error, **kw)


async def test_get_never_waits_and_ensure_waits_for_the_first_read_only() -> None:
    source, clock = FakeQuotas(), Clock()
    source.items["team"] = [quota("q", {f"limits.{MEM}": 500})]  # type: ignore[list-item]
    source.gate.clear()
    cache = cache_of(source, clock, ttl_s=10.0)
    try:
        assert cache.get("team") is None  # not read yet: the read has started
        await wait_until(lambda: source.reads == ["team"], what="the read")
        ensure = asyncio.create_task(cache.ensure("team"))
        await asyncio.sleep(0)
        assert not ensure.done() and cache.known() == {}  # the read is held at the gate
        source.gate.set()
        view = await ensure
        assert view == (QuotaLimit(quota="q", resource=MEM, hard=500),)
        clock.now = 11.0  # stale: get answers at once from memory and reads again meanwhile
        assert cache.get("team") is view and await cache.ensure("team") is view
        await wait_until(lambda: source.reads == ["team", "team"], what="the re-read")
    finally:
        await cache.close()


async def test_fresh_reads_again_once_the_view_is_older_than_the_ttl() -> None:
    source, clock = FakeQuotas(), Clock()
    cache = cache_of(source, clock, ttl_s=10.0)
    first = await cache.fresh("team")
    clock.now = 9.0
    assert await cache.fresh("team") is first and source.reads == ["team"]
    clock.now = 10.0
    source.items["team"] = [quota("q", {f"limits.{CORES}": 50})]  # type: ignore[list-item]
    assert await cache.fresh("team") == (QuotaLimit(quota="q", resource=CORES, hard=50),)
    assert source.reads == ["team", "team"]


async def test_a_ttl_of_zero_reads_at_every_fresh_question() -> None:
    source, clock = FakeQuotas(), Clock()
    cache = cache_of(source, clock, ttl_s=0.0)
    await cache.fresh("team")
    await cache.fresh("team")
    assert source.reads == ["team", "team"]


async def test_concurrent_askers_share_one_read() -> None:
    source, clock = FakeQuotas(), Clock()
    source.gate.clear()
    cache = cache_of(source, clock)
    views = asyncio.gather(*(cache.fresh("team") for _ in range(5)), cache.ensure("team"))
    await wait_until(lambda: source.reads == ["team"], what="the read")
    source.gate.set()
    assert len({id(v) for v in await views}) == 1
    assert source.reads == ["team"]


async def test_a_failing_api_is_counted_keeps_the_last_good_view_and_is_retried_later() -> None:
    source, clock, errors = FakeQuotas(), Clock(), list[str]()
    source.items["team"] = [quota("q", {f"limits.{MEM}": 500})]  # type: ignore[list-item]
    cache = cache_of(source, clock, errors, ttl_s=10.0, error_ttl_s=1.0)
    good = await cache.fresh("team")
    source.failing = True
    assert await cache.fresh("new") is None and errors == [READ_FAILED]
    clock.now = 10.0
    assert await cache.fresh("team") is good and errors == [READ_FAILED, READ_FAILED]
    clock.now = 10.5  # within error_ttl_s of the failed read: no new read
    assert await cache.fresh("team") is good
    assert source.reads == ["team", "new", "team"]
    clock.now = 11.0
    source.failing = False
    assert await cache.fresh("new") == ()


async def test_a_hanging_api_times_out_and_is_counted() -> None:
    source, clock, errors = FakeQuotas(), Clock(), list[str]()
    source.gate.clear()
    cache = cache_of(source, clock, errors, timeout_s=0.05)
    assert await cache.fresh("team") is None and await cache.ensure("team") is None
    assert errors == [READ_FAILED]


async def test_bad_limits_are_counted_when_the_quota_changes_not_at_every_read() -> None:
    source, clock, errors = FakeQuotas(), Clock(), list[str]()
    source.items["team"] = [quota("q", {f"limits.{MEM}": "junk"})]  # type: ignore[list-item]
    cache = cache_of(source, clock, errors, ttl_s=0.0)
    await cache.fresh("team")
    await cache.fresh("team")
    assert errors == [INVALID_QUANTITY] and len(source.reads) == 2


async def test_want_reads_unknown_namespaces_and_close_cancels_reads_in_flight() -> None:
    source, clock = FakeQuotas(), Clock()
    source.gate.clear()
    cache = cache_of(source, clock)
    cache.want(["a", "b", "a"])
    await wait_until(lambda: sorted(source.reads) == ["a", "b"], what="both reads")
    await cache.close()
    assert cache.known() == {} and cache.get("a") is None
    await cache.close()
