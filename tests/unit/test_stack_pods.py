"""``gpubus submit``/``get pods`` pure parts: manifests to pods, phase tracking, the table.

Cases: --count copies become generateName, made one at a time as they are taken; bad documents
are refused naming the document; the tracker settles on started/failed/unschedulable pods and
measures submit->Running from the create call; the GPU column decodes
hami.io/vgpu-devices-allocated.
"""

from __future__ import annotations

import itertools

import pytest

from gpubus.pods import PodTracker, gpu_column, percentile, pod_rows, pods_from_documents, render_table
from shared.errors import BadInput


def doc(name: str = "p") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": []}}


def test_count_copies_use_generate_name_and_a_single_pod_keeps_its_name() -> None:
    many = pods_from_documents([doc()], 3)
    assert [p["metadata"] for p in many] == [{"generateName": "p-"}] * 3
    assert [p["metadata"] for p in pods_from_documents([doc()], 1)] == [{"name": "p"}]


def test_copies_are_made_as_they_are_taken_not_all_before_the_first() -> None:
    pods = pods_from_documents([doc("a"), doc("b")], 10**12)
    assert len(pods) == 2 * 10**12
    first, second = itertools.islice(pods, 2)
    first["metadata"]["labels"] = {"mine": "only"}
    assert second["metadata"] == {"generateName": "a-"}


@pytest.mark.parametrize(("docs", "message"), [
    ([{"kind": "Service", "metadata": {"name": "s"}}], "document 1 is not a Pod"),
    (["just text"], "document 1 is not a Pod"),
    ([{"kind": "Pod", "metadata": {}}], "metadata.name or metadata.generateName is required"),
    ([None], "no Pod in the file"),
])
def test_bad_documents_are_refused_with_the_document_named(docs: list[object], message: str) -> None:
    with pytest.raises(BadInput, match=message):
        pods_from_documents(docs, 1)


def pod(uid: str, phase: str, conditions: list[dict[str, str]] | None = None) -> dict[str, object]:
    return {"metadata": {"uid": uid}, "status": {"phase": phase, "conditions": conditions or []}}


def test_tracker_measures_submit_to_running_and_settles_on_unschedulable() -> None:
    t = PodTracker()
    t.submitted("a", 100.0)
    t.submitted("b", 100.0)
    t.observe(pod("a", "Running"), 100.25)
    assert not t.settled()
    t.observe(pod("b", "Pending", [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/3 nodes are available"}]), 101.0)
    assert t.settled()
    assert t.latencies() == [0.25]
    assert "1 x Unschedulable: 0/3 nodes are available" in "\n".join(t.summary())


def test_events_seen_before_create_returns_are_kept() -> None:
    t = PodTracker()
    t.observe(pod("a", "Running"), 5.0)
    t.submitted("a", 4.0)
    assert t.latencies() == [0.0]  # never before the submit


def test_percentile_is_nearest_rank() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0


def test_gpu_column_and_table() -> None:
    annotated = {"metadata": {"name": "p", "namespace": "default",
                              "creationTimestamp": "2026-01-01T00:00:00Z",
                              "annotations": {"hami.io/vgpu-devices-allocated":
                                              "GPU-0123456789ab-cdef,NVIDIA,3000,30:;"}},
                 "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}}
    assert gpu_column(annotated, wide=False) == "GPU-01234567:3000MiB/30%"
    rows = pod_rows([annotated], wide=False, all_namespaces=False, now=1767225630.0)
    assert rows[1] == ["p", "Running", "node-1", "GPU-01234567:3000MiB/30%", "30s"]
    assert render_table(rows).splitlines()[0].split() == ["NAME", "STATUS", "NODE", "GPU", "AGE"]
