"""Events as CloudEvents (gpubus.cloudevents): every kind becomes a v1.0 structured-mode event that
the CloudEvents SDK reads back, whose data validates against the schema its dataschema names.

Cases: each catalogued kind (attributes, data); time is RFC 3339 UTC with microseconds, and left
out for a time no clock shows; a source with spaces or odd characters stays a URI reference.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from event_samples import node_events
from jsonschema import Draft202012Validator

from gpubus.cloudevents import cloudevent, render_cloudevent, rfc3339
from shared.contract import messages
from shared.events import Event, PodRejected

SCHEMAS = {m.schema["$id"]: m.schema for m in messages()}


@pytest.mark.parametrize("event", node_events("node-1"), ids=lambda e: e.KIND)
def test_every_kind_is_a_cloudevent_the_sdk_reads(event: Event) -> None:
    event = dataclasses.replace(event, source="scheduler/gpubus-scheduler-0", ts=1_767_225_600.25)
    line = render_cloudevent(event)
    parsed = JSONFormat().read(CloudEvent, line.encode())
    attrs = json.loads(line)
    assert parsed.get_id() == event.id
    assert parsed.get_type() == f"io.gpubus.{event.KIND}.v1"
    assert parsed.get_source() == "/gpubus/scheduler/gpubus-scheduler-0"
    assert parsed.get_subject() == f"gpubus.{event.KIND}.node-1"
    assert parsed.get_time().isoformat() == "2026-01-01T00:00:00.250000+00:00"
    assert attrs["specversion"] == "1.0" and attrs["datacontenttype"] == "application/json"
    assert parsed.get_data() == attrs["data"]
    Draft202012Validator(SCHEMAS[attrs["dataschema"]]).validate(attrs["data"])


def test_time_is_utc_with_microseconds() -> None:
    assert rfc3339(0.000001) == "1970-01-01T00:00:00.000001Z"


@pytest.mark.parametrize("ts", [float("nan"), float("inf"), 1e300])
def test_a_time_no_clock_shows_is_left_out(ts: float) -> None:
    event = PodRejected(namespace="ns", name="p", reason="r", ts=ts)
    assert "time" not in cloudevent(event)
    assert "time" not in json.loads(render_cloudevent(event))


def test_an_odd_source_stays_a_uri_reference() -> None:
    out = cloudevent(PodRejected(namespace="ns", name="p", reason="r", source="node agent/n 1?x"))
    assert out["source"] == "/gpubus/node%20agent/n%201%3Fx"
    assert cloudevent(PodRejected(namespace="ns", name="p", reason="r"))["source"] == "/gpubus/unknown"
