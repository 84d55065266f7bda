"""An event as a CloudEvent (v1.0, JSON structured mode): for consumers that would rather not
decode msgpack, and for tools that speak CloudEvents (Knative, Argo Events, event gateways).

Attributes: ``id`` the event's id, ``source`` ``/gpubus/<who made it>``, ``type``
``io.gpubus.<kind>.v<major>``, ``time`` RFC 3339 UTC, ``subject`` the NATS subject,
``dataschema`` the JSON Schema's ``$id`` (docs/events/schemas), ``data`` the event's fields as
JSON with ``kind`` and ``v``. Pure: no NATS, no I/O.
"""

from __future__ import annotations

import math
import urllib.parse
from datetime import UTC, datetime
from typing import Any

import orjson

from shared.codec import to_wire
from shared.contract.document import schema_id
from shared.events import Event, subject_for

SPECVERSION = "1.0"
TYPE_PREFIX = "io.gpubus"


def cloudevent(event: Event) -> dict[str, Any]:
    data = to_wire(event)
    data["kind"] = event.KIND
    data["v"] = event.VERSION
    out: dict[str, Any] = {
        "specversion": SPECVERSION,
        "id": event.id,
        "source": "/gpubus/" + urllib.parse.quote(event.source or "unknown", safe="/-_.~"),
        "type": f"{TYPE_PREFIX}.{event.KIND}.v{event.VERSION}",
        "subject": subject_for(event),
        "datacontenttype": "application/json",
        "dataschema": schema_id(event.KIND, event.VERSION),
        "data": data,
    }
    time = rfc3339(event.ts)
    if time is not None:
        out["time"] = time
    return out


def rfc3339(ts: float) -> str | None:
    """Unix seconds -> ``2026-01-02T03:04:05.678901Z``; None for a time no clock shows (left out)."""
    if not math.isfinite(ts):
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


def render_cloudevent(event: Event) -> str:
    """One line of CloudEvents JSON."""
    return orjson.dumps(cloudevent(event)).decode()
