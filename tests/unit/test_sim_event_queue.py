"""The event recorder's queue bound, while its writer is busy.

Case matrix: as client-go's ``maxQueuedEvents``, ``queue_limit`` bounds the events *waiting*; the
one being written is out of the queue. With a limit of 2, one event in flight and two queued leave
no room (the next is dropped and counted); once written, there is room again; ``drained`` waits for
the one in flight, and returns at once when nothing was ever queued.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpubus_local.sim.events import EventRecorder, RecorderSettings, pod_reference
from shared.kube_types import Event


class GatedSink:
    """Creates wait for ``gate``; ``writing`` is set when the first one starts."""

    def __init__(self) -> None:
        self.gate, self.writing = asyncio.Event(), asyncio.Event()
        self.created: list[str] = []

    async def create_event(self, namespace: str, event: Event) -> Event:
        self.writing.set()
        await self.gate.wait()
        self.created.append(event["involvedObject"]["name"])
        return event

    async def patch_event(self, namespace: str, name: str, merge_patch: dict[str, Any]) -> Event:
        raise AssertionError("no repeats here")


def record(recorder: EventRecorder, pod: str) -> None:
    recorder.record(pod_reference({"metadata": {"name": pod, "namespace": "n"}}), "Normal", "Scheduled",
                    f"Successfully assigned n/{pod}")


async def test_a_full_queue_drops_and_counts() -> None:
    sink = GatedSink()
    recorder = EventRecorder(sink, {"component": "gpubus-scheduler"}, RecorderSettings(queue_limit=2))
    await asyncio.wait_for(recorder.drained(), 5)  # nothing queued: returns at once
    task = asyncio.create_task(recorder.run(), name="test-event-recorder")
    try:
        record(recorder, "p0")
        await asyncio.wait_for(sink.writing.wait(), 5)  # p0 is in flight
        record(recorder, "p1")
        record(recorder, "p2")
        assert recorder.stats.dropped == 0
        record(recorder, "p3")
        assert recorder.stats.dropped == 1
        draining = asyncio.create_task(recorder.drained(), name="test-drained")
        await asyncio.sleep(0)
        assert not draining.done()
        sink.gate.set()
        await asyncio.wait_for(draining, 5)
        record(recorder, "p4")
        await asyncio.wait_for(recorder.drained(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert sink.created == ["p0", "p1", "p2", "p4"]
    assert (recorder.stats.created, recorder.stats.dropped, recorder.stats.failed) == (4, 1, 0)
