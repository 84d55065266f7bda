"""Server-side Tables for ``kubectl get``: apimachinery's human durations and the events printer.

Case matrix: HumanDuration at each unit boundary; an event row (last seen from ``lastTimestamp``,
else from the first time; ``series`` overrides both and the count; a count of 1 where none is
written; ``kind/name``; ``component, host`` as the source); rows carry metadata, the whole object
(``includeObject=Object``) or nothing (``None``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpubus_local.sim.tables import as_table, human_duration


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (119, "119s"), (120, "2m"), (125, "2m5s"), (599, "9m59s"),
    (600, "10m"), (179 * 60 + 59, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"),
    (47 * 3600, "47h"), (48 * 3600, "2d"), (49 * 3600, "2d1h"), (8 * 86400, "8d"), (730 * 86400, "2y"),
    (731 * 86400, "2y1d"), (8 * 365 * 86400, "8y"),
])
def test_human_durations(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


COLUMNS = ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count",
           "Name"]


def ago(minutes: int) -> str:
    """A time ``minutes`` and a half ago: printed as whole minutes however long the test takes."""
    return (datetime.now(UTC) - timedelta(minutes=minutes, seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(**fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p.17f", "namespace": "default"}, "type": "Warning",
            "reason": "FailedScheduling", "involvedObject": {"kind": "Pod", "name": "p"},
            "message": " 0/4 nodes are available \n",
            "source": {"component": "gpubus-scheduler"}, **fields}


def row(obj: dict[str, Any], include: str = "Metadata") -> dict[str, Any]:
    table = as_table("events", [obj], "9", include)
    assert [c["name"] for c in table["columnDefinitions"]] == COLUMNS
    [only] = table["rows"]
    return dict(only)


def test_an_event_row_is_printed_as_the_real_server_prints_it() -> None:
    cells = row(event(firstTimestamp=ago(40), lastTimestamp=ago(12), count=4))["cells"]
    assert cells == ["12m", "Warning", "FailedScheduling", "pod/p", "", "gpubus-scheduler",
                     "0/4 nodes are available", "40m", 4, "p.17f"]


def test_an_event_without_timestamps_or_count_reads_its_event_time_and_counts_one() -> None:
    cells = row(event(eventTime=ago(20).replace("Z", ".123456Z"), source={}, reportingComponent="kubelet",
                      reportingInstance="node-1"))["cells"]
    assert (cells[0], cells[5], cells[7], cells[8]) == ("20m", "kubelet, node-1", "20m", 1)


def test_a_series_gives_the_last_seen_time_and_the_count() -> None:
    cells = row(event(firstTimestamp=ago(60), series={"count": 7, "lastObservedTime": ago(15)}))["cells"]
    assert (cells[0], cells[8]) == ("15m", 7)


def test_rows_carry_metadata_the_whole_object_or_nothing() -> None:
    obj = event(lastTimestamp=ago(1))
    assert row(obj)["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                  "metadata": obj["metadata"]}
    assert row(obj, "Object")["object"] is obj
    assert row(obj, "None")["object"] is None
