"""What the scheduler holds per pod: slim records of the pods that matter, none of the others.

Case matrix: ``slim_pod`` keeps our pods, HAMi-annotated pods of any scheduler and pods with a
ledger entry, drops the rest, and keeps only identity, phase, node, container names, the GPU count
they ask for and ``hami.io/`` annotations; a container annotated with more cards than it asks for
(none, "0", garbage, or 2 for 1) is not adopted; ``list_and_watch`` with a transform yields and
holds only the slim records, forgets a pod that stops mattering without an event, and still
reports its deletion; the pod cache between filter, prioritize and bind reuses a parse only for
the same pod version.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.scheduler.pod_cache import PodCache
from services.scheduler.reconcile import adoptable, slim_pod
from shared import annotations as ann
from shared.errors import AnnotationError
from shared.kube import list_and_watch
from shared.kube_types import WatchEvent
from shared.requests import pod_request


def pod(
    name: str, *, scheduler: str = "gpubus-scheduler", rv: str = "1", **annotations: str
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {"app": "x"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}" * 500, **annotations},
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": "n1",
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "env": [{"name": "A", "value": "b" * 100}],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "cpu": "2"},
                        "requests": {"memory": "1Gi"},
                    },
                }
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready"}]},
    }


def slim(p: dict[str, Any], known: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    return slim_pod(p, scheduler_name="gpubus-scheduler", known=lambda uid: uid in known)


HAMI = {ann.DEVICES_ALLOCATED: ";GPU-0,NVIDIA,1000,10:;", ann.BIND_PHASE: "success"}


def test_our_pods_hami_pods_and_ledger_pods_are_kept_others_dropped() -> None:
    assert slim(pod("ours")) is not None
    assert slim(pod("hami", scheduler="hami-scheduler", **HAMI)) is not None
    assert slim(pod("ledgered", scheduler="other"), frozenset({"uid-ledgered"})) is not None
    assert slim(pod("other", scheduler="default-scheduler")) is None


def test_an_empty_scheduler_name_keeps_every_pod() -> None:
    assert slim_pod(pod("x", scheduler="any"), scheduler_name="", known=lambda _: False) is not None


def test_the_record_keeps_only_what_the_reconciler_reads() -> None:
    record = slim(pod("hami", scheduler="hami-scheduler", **HAMI))
    assert record == {
        "metadata": {
            "uid": "uid-hami",
            "namespace": "ns",
            "name": "hami",
            "resourceVersion": "1",
            "annotations": HAMI,
        },
        "spec": {
            "nodeName": "n1",
            "schedulerName": "hami-scheduler",
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_slim_record_adopts_exactly_like_the_full_pod() -> None:
    full = pod("hami", scheduler="hami-scheduler", **HAMI)
    record = slim(full)
    assert record is not None and adoptable(record) == adoptable(full) is not None


TWO_CARDS = {ann.DEVICES_ALLOCATED: ";GPU-0,NVIDIA,1000,10:GPU-1,NVIDIA,1000,10:;"}


@pytest.mark.parametrize(
    ("limits", "annotations", "says"),
    [
        ({}, HAMI, "gives 1 GPU(s) to container 'main', which asks for 0 nvidia.com/gpu"),
        ({"nvidia.com/gpu": "0"}, HAMI, "which asks for 0"),
        ({"nvidia.com/gpu": "lots"}, HAMI, "which asks for 0"),
        ({"nvidia.com/gpu": "1"}, TWO_CARDS, "gives 2 GPU(s) to container 'main', which asks for 1"),
    ],
)
def test_a_container_holding_more_cards_than_it_asks_for_is_not_adopted(
    limits: dict[str, str], annotations: dict[str, str], says: str
) -> None:
    # anyone who can create a pod could book any card by writing the annotation on a GPU-less pod
    full = pod("forged", scheduler="default-scheduler", **annotations)
    full["spec"]["containers"][0]["resources"]["limits"] = limits
    record = slim(full)
    assert record is not None
    for p in (full, record):
        with pytest.raises(AnnotationError, match=re.escape(says)):
            adoptable(p)


def test_requests_count_when_limits_do_not_name_the_gpu() -> None:
    full = pod("hami", scheduler="hami-scheduler", **TWO_CARDS)
    full["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "2"}}
    adopted = adoptable(full)
    assert adopted is not None and adopted == adoptable(slim(full) or {})
    assert [d.uuid for d in adopted.devices[1]] == ["GPU-0", "GPU-1"]


def _stream(items: list[dict[str, Any]], events: list[WatchEvent]) -> tuple[Any, Any]:
    async def lister() -> tuple[list[Any], str]:
        return items, "1"

    async def watcher(rv: str) -> AsyncIterator[WatchEvent]:
        for e in events:
            yield e
        raise AssertionError("end of the scripted watch")

    return lister, watcher


async def _collect(items: list[dict[str, Any]], events: list[WatchEvent], n: int) -> list[tuple[str, str]]:
    lister, watcher = _stream(items, events)
    out: list[tuple[str, str]] = []
    async for e in list_and_watch(lister, watcher, transform=slim):
        assert "labels" not in e["object"]["metadata"]  # only slim records come out
        out.append((e["type"], e["object"]["metadata"]["name"]))
        if len(out) == n:
            break
    return out


async def test_a_transformed_stream_yields_only_pods_that_matter() -> None:
    got = await _collect(
        [pod("ours"), pod("other", scheduler="default-scheduler")],
        [
            {"type": "ADDED", "object": pod("other2", scheduler="default-scheduler", rv="2")},
            {"type": "MODIFIED", "object": pod("ours", rv="3")},
            {"type": "DELETED", "object": pod("other", scheduler="default-scheduler", rv="4")},
            {"type": "DELETED", "object": pod("ours", rv="5")},
        ],
        3,
    )
    assert got == [("ADDED", "ours"), ("MODIFIED", "ours"), ("DELETED", "ours")]


async def test_a_kept_pod_is_reported_deleted_even_if_its_last_state_no_longer_matters() -> None:
    hami = pod("hami", scheduler="hami-scheduler", **HAMI)
    plain = pod("hami", scheduler="hami-scheduler", rv="2")
    got = await _collect([hami], [{"type": "DELETED", "object": plain}], 2)
    assert got == [("ADDED", "hami"), ("DELETED", "hami")]


async def test_a_kept_pod_that_stops_mattering_is_forgotten_without_an_event() -> None:
    hami = pod("hami", scheduler="hami-scheduler", **HAMI)
    plain = pod("hami", scheduler="hami-scheduler", rv="2")
    got = await _collect(
        [hami],
        [
            {"type": "MODIFIED", "object": plain},
            {"type": "DELETED", "object": pod("hami", scheduler="hami-scheduler", rv="3")},
            {"type": "ADDED", "object": pod("ours", rv="4")},
        ],
        2,
    )
    assert got == [("ADDED", "hami"), ("ADDED", "ours")]


# --- the filter -> prioritize -> bind pod cache ------------------------------------------------


def _gpu_pod(uid: str, version: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": uid, "resourceVersion": version},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


def test_the_pod_cache_hands_back_the_request_parsed_from_the_very_same_pod_version() -> None:
    cache = PodCache()
    seen = _gpu_pod("u1", "7")
    parsed = pod_request(seen)
    cache.put("u1", seen, parsed)
    assert cache.request(_gpu_pod("u1", "7")) is parsed
    assert cache.request(_gpu_pod("u1", "8")) is None  # the pod changed since filter: parse again
    assert cache.request(_gpu_pod("u2", "7")) is None
    assert cache.request({"metadata": {"uid": "u1"}}) is None  # no version: cannot tell
    assert cache.request({"metadata": "junk"}) is None
    assert cache.pop("u1") == (seen, parsed)
    assert cache.request(seen) is None and cache.pop("u1") is None


def test_the_pod_cache_keeps_only_the_newest_pods() -> None:
    cache = PodCache(size=2)
    for i in range(3):
        cache.put(f"u{i}", _gpu_pod(f"u{i}", "1"))
    assert cache.pop("u0") is None and cache.pop("u2") is not None


def test_a_memory_only_request_asks_for_the_default_card_count() -> None:
    # HAMi's defaultGPUNum: gpumem without a count is one card; our own binder places such pods
    full = pod("mem-only", scheduler="gpubus-scheduler", **HAMI)
    full["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpumem": "1000"}}
    adopted = adoptable(full)
    assert adopted is not None and adopted == adoptable(slim(full) or {})
    assert [d.uuid for d in adopted.devices[1]] == ["GPU-0"]
