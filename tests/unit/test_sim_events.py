"""The stand-ins' events: the core/v1 Event client-go's recorder writes, its correlator, the recorder.

Case matrix. Builder: name ``<object>.<ns in hex>`` in the object's namespace ("default" for none),
count 1, first = last timestamp, source and reporting fields, container field path, note cut at
1024. Correlator: an identical repeat patches the first event's count/lastTimestamp/message
(another message, type, reason, source, container or object is a new event); the 10th distinct
message for one object and reason within 10 minutes becomes "(combined from similar events)", which
later ones patch, and after 10 quiet minutes messages count afresh; 25 events per source and object,
then one per 5 minutes (the count still rises). Recorder (against an in-memory sink): writes in
order, a repeat as a patch, a patch of a vanished event as a create with the count, retries while
the server is unreachable, gives up on a refusal, drops past the queue limit; ``record`` never
raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gpubus_local.sim.events import (
    Correlator,
    EventRecorder,
    RecorderSettings,
    build_event,
    pod_reference,
    truncate_note,
)
from shared.kube_errors import Conflict, KubeRejected, KubeUnavailable, NotFound
from shared.kube_types import Event, EventSource, ObjectReference

SCHEDULER: EventSource = {"component": "gpubus-scheduler"}
KUBELET: EventSource = {"component": "kubelet", "host": "node-1"}
T0 = 1_780_000_000_000_000_000  # ns; 2026-05-28T20:26:40Z
POD = {"metadata": {"name": "p", "namespace": "team", "uid": "u-1", "resourceVersion": "7"}}


def event(message: str = "0/4 nodes are available", *, at_s: float = 0.0, reason: str = "FailedScheduling",
          involved: ObjectReference | None = None, source: EventSource = SCHEDULER) -> Event:
    return build_event(source, involved or pod_reference(POD), "Warning", reason, message,
                       now_ns=T0 + int(at_s * 1e9))


# --------------------------------------------------------------------------- builder


def test_an_event_is_built_as_client_gos_recorder_makes_it() -> None:
    built = build_event(KUBELET, pod_reference(POD, "spec.containers{main}"), "Normal", "Started",
                        "Started container main", now_ns=T0)
    assert built == {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"p.{T0:x}", "namespace": "team"},
        "involvedObject": {"kind": "Pod", "namespace": "team", "name": "p", "uid": "u-1", "apiVersion": "v1",
                           "resourceVersion": "7", "fieldPath": "spec.containers{main}"},
        "reason": "Started", "message": "Started container main", "source": KUBELET,
        "firstTimestamp": "2026-05-28T20:26:40Z", "lastTimestamp": "2026-05-28T20:26:40Z", "count": 1,
        "type": "Normal", "reportingComponent": "kubelet", "reportingInstance": "node-1"}


def test_an_event_about_a_cluster_scoped_object_lives_in_default() -> None:
    node: ObjectReference = {"kind": "Node", "name": "node-1", "uid": "node-1", "apiVersion": "v1"}
    built = build_event(KUBELET, node, "Normal", "Starting", "Starting kubelet.", now_ns=T0)
    assert built["metadata"]["namespace"] == "default"
    assert "resourceVersion" not in pod_reference({"metadata": {"name": "p", "namespace": "n"}})


def test_a_note_longer_than_1024_is_cut_with_an_ellipsis() -> None:
    assert truncate_note("x" * 1024) == "x" * 1024
    assert truncate_note("x" * 1025) == "x" * 1020 + " ..."


# --------------------------------------------------------------------------- correlator


def test_an_identical_repeat_patches_the_first_event() -> None:
    correlator = Correlator()
    first = correlator.correlate(event(at_s=0), 0.0)
    assert first is not None and first.patch is None
    second = correlator.correlate(event(at_s=5), 5.0)
    third = correlator.correlate(event(at_s=9), 9.0)
    assert second is not None and third is not None
    assert third.patch == {"count": 3, "lastTimestamp": "2026-05-28T20:26:49Z",
                           "message": "0/4 nodes are available"}
    assert third.event["metadata"]["name"] == first.event["metadata"]["name"]
    assert (third.event["count"], third.event["firstTimestamp"]) == (3, first.event["firstTimestamp"])


@pytest.mark.parametrize("other", [
    event("0/4 nodes are available: 4 CardInsufficientMemory."),
    event(reason="Scheduled"),
    event(source=KUBELET),
    event(involved=pod_reference(POD, "spec.containers{main}")),
    event(involved=pod_reference({"metadata": {**POD["metadata"], "uid": "u-2"}})),
])
def test_an_event_that_differs_in_anything_but_time_is_a_new_one(other: Event) -> None:
    correlator = Correlator()
    correlator.correlate(event(), 0.0)
    result = correlator.correlate(other, 1.0)
    assert result is not None and result.patch is None


def test_the_tenth_distinct_message_is_combined_and_later_ones_patch_that() -> None:
    correlator = Correlator()
    for i in range(9):
        result = correlator.correlate(event(f"message {i}", at_s=i), float(i))
        assert result is not None and result.patch is None and result.event["message"] == f"message {i}"
    combined = correlator.correlate(event("message 9", at_s=9), 9.0)
    assert combined is not None and combined.patch is None
    assert combined.event["message"] == "(combined from similar events): message 9"
    assert combined.event["reportingComponent"] == ""
    later = correlator.correlate(event("message 10", at_s=10), 10.0)
    assert later is not None and later.event["metadata"]["name"] == combined.event["metadata"]["name"]
    assert later.patch == {"count": 2, "lastTimestamp": "2026-05-28T20:26:50Z",
                           "message": "(combined from similar events): message 10"}


def test_similar_messages_count_afresh_after_ten_quiet_minutes() -> None:
    correlator = Correlator()
    for i in range(9):
        correlator.correlate(event(f"message {i}"), float(i))
    result = correlator.correlate(event("message 9"), 8.0 + 601.0)
    assert result is not None and result.event["message"] == "message 9"


def test_a_source_may_write_25_events_about_an_object_then_one_per_five_minutes() -> None:
    correlator = Correlator()
    results = [correlator.correlate(event(), float(i) / 100) for i in range(26)]
    assert all(r is not None for r in results[:25]) and results[25] is None
    assert correlator.correlate(event(reason="Scheduled"), 1.0) is None  # the budget is per object
    allowed = correlator.correlate(event(), 0.25 + 300.0)
    assert allowed is not None and allowed.patch is not None and allowed.patch["count"] == 27


# --------------------------------------------------------------------------- recorder


class MemorySink:
    """The API server's event verbs over a dict: 409 for a taken name, 404 for a patch of none."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], Event] = {}
        self.calls: list[str] = []
        self.unreachable = 0
        self.refuse = False

    def _enter(self, call: str) -> None:
        self.calls.append(call)
        if self.unreachable:
            self.unreachable -= 1
            raise KubeUnavailable(f"{call}: connection refused")
        if self.refuse:
            raise KubeRejected(f"{call}: 422 invalid")

    async def create_event(self, namespace: str, event: Event) -> Event:
        self._enter("create")
        key = (namespace, event["metadata"]["name"])
        if key in self.events:
            raise Conflict(f"events {key[1]} already exists")
        self.events[key] = event
        return event

    async def patch_event(self, namespace: str, name: str, merge_patch: dict[str, Any]) -> Event:
        self._enter("patch")
        if (namespace, name) not in self.events:
            raise NotFound(f"events {name} not found")
        patched: Event = {**self.events[namespace, name], **merge_patch}  # type: ignore[typeddict-item]
        self.events[namespace, name] = patched
        return patched


@asynccontextmanager
async def running(sink: MemorySink, **settings: Any) -> AsyncIterator[EventRecorder]:
    clock = iter(range(T0, T0 + 10**12, 10**9))  # one second per event
    recorder = EventRecorder(sink, SCHEDULER, RecorderSettings(retry_delay_s=0.0, **settings),
                             clock=lambda: next(clock))
    task = asyncio.create_task(recorder.run(), name="test-event-recorder")
    try:
        yield recorder
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def drained(recorder: EventRecorder) -> None:
    await asyncio.wait_for(recorder.drained(), 5)


async def test_repeats_are_written_as_patches_of_one_event() -> None:
    sink = MemorySink()
    async with running(sink) as recorder:
        for _ in range(3):
            recorder.record(pod_reference(POD), "Warning", "FailedScheduling", "0/4 nodes are available")
        recorder.record(pod_reference(POD), "Normal", "Scheduled", "Successfully assigned team/p to node-1")
        await drained(recorder)
    assert sink.calls == ["create", "patch", "patch", "create"]
    written = [(e["reason"], e["count"]) for e in sink.events.values()]
    assert written == [("FailedScheduling", 3), ("Scheduled", 1)]
    assert (recorder.stats.created, recorder.stats.patched, recorder.stats.failed) == (2, 2, 0)


async def test_a_repeat_of_a_vanished_event_creates_it_again_with_its_count() -> None:
    sink = MemorySink()
    async with running(sink) as recorder:
        recorder.record(pod_reference(POD), "Warning", "FailedScheduling", "full")
        await drained(recorder)
        sink.events.clear()  # expired (the API server's event TTL)
        recorder.record(pod_reference(POD), "Warning", "FailedScheduling", "full")
        await drained(recorder)
    assert sink.calls == ["create", "patch", "create"]
    [again] = sink.events.values()
    assert again["count"] == 2 and again["firstTimestamp"] != again["lastTimestamp"]


async def test_writes_are_retried_while_the_api_server_is_unreachable() -> None:
    sink = MemorySink()
    sink.unreachable = 2
    async with running(sink) as recorder:
        recorder.record(pod_reference(POD), "Normal", "Scheduled", "Successfully assigned team/p to node-1")
        await drained(recorder)
    assert sink.calls == ["create"] * 3 and len(sink.events) == 1
    assert (recorder.stats.retries, recorder.stats.failed) == (2, 0)


async def test_an_event_is_given_up_after_its_tries_or_a_refusal_and_the_next_is_written() -> None:
    sink = MemorySink()
    sink.unreachable = 3
    async with running(sink, max_tries=3) as recorder:
        recorder.record(pod_reference(POD), "Normal", "Scheduled", "lost while the server is down")
        recorder.record(pod_reference(POD), "Normal", "Started", "Started container main")
        await drained(recorder)
        sink.refuse = True
        recorder.record(pod_reference(POD), "Warning", "Failed", "refused")
        await drained(recorder)
    assert [e["reason"] for e in sink.events.values()] == ["Started"]
    assert recorder.stats.failed == 2


async def test_past_the_queue_limit_events_are_dropped_and_counted() -> None:
    sink = MemorySink()
    recorder = EventRecorder(sink, SCHEDULER, RecorderSettings(queue_limit=2))  # not running: nothing drains
    for i in range(4):
        pod = {"metadata": {"name": f"p{i}", "namespace": "n"}}
        recorder.record(pod_reference(pod), "Normal", "Scheduled", "Successfully assigned")
    assert (recorder.stats.dropped, recorder.stats.failed) == (2, 0)
    assert not sink.calls


def test_record_never_raises() -> None:
    recorder = EventRecorder(MemorySink(), SCHEDULER, clock=lambda: 1 // 0)
    recorder.record(pod_reference(POD), "Normal", "Scheduled", "clock broken")
    assert recorder.stats.failed == 1


async def test_with_normal_events_off_only_warnings_are_written() -> None:
    sink = MemorySink()
    async with running(sink, normal=False) as recorder:
        recorder.record(pod_reference(POD), "Normal", "Scheduled", "Successfully assigned team/p to node-1")
        recorder.record(pod_reference(POD), "Warning", "FailedScheduling", "0/4 nodes are available")
        await drained(recorder)
    assert [e["reason"] for e in sink.events.values()] == ["FailedScheduling"]
    assert (recorder.stats.created, recorder.stats.dropped, recorder.stats.spam) == (1, 0, 0)
