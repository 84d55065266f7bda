"""The simulated kubelet's pure parts: the kubelet's view of a pod, run durations, status patches."""

from __future__ import annotations

import pytest

from gpubus_local.sim.node import (
    ADMISSION_FAILED,
    SimContainer,
    failed_status,
    parse_duration,
    running_status,
    sim_pod,
    succeeded_status,
)


def test_the_kubelet_sees_init_containers_first_with_their_device_counts() -> None:
    pod = {"metadata": {"namespace": "ns", "name": "p", "uid": "u"},
           "spec": {"initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                    "containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": 1}}},
                                   {"name": "b"}]}}
    view = sim_pod(pod, "nvidia.com/gpu")  # type: ignore[arg-type]
    assert view.containers == (SimContainer(name="i", gpus=2, init=True), SimContainer(name="a", gpus=1),
                               SimContainer(name="b", gpus=0))


@pytest.mark.parametrize(("text", "seconds"), [
    (None, 30.0), ("5s", 5.0), ("2m", 120.0), ("500ms", 0.5), ("7", 7.0), ("inf", None), ("never", None),
    ("soon", 30.0),
])
def test_durations(text: str | None, seconds: float | None) -> None:
    assert parse_duration(text, 30.0) == seconds


def test_status_patches_follow_the_kubelet() -> None:
    view = sim_pod({"metadata": {"namespace": "n", "name": "p", "uid": "u"},
                    "spec": {"containers": [{"name": "a"}]}}, "nvidia.com/gpu")
    running = running_status(view, "10.0.0.1")["status"]
    assert running["phase"] == "Running" and running["containerStatuses"][0]["state"].keys() == {"running"}
    assert {c["type"]: c["status"] for c in running["conditions"]}["Ready"] == "True"
    done = succeeded_status(view)["status"]
    assert done["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    failed = failed_status("Allocate failed due to no allocation decided for this node")["status"]
    assert failed["phase"] == "Failed" and failed["reason"] == ADMISSION_FAILED == "UnexpectedAdmissionError"


def test_finished_init_containers_and_ended_containers_keep_their_ids_for_kubectl_logs() -> None:
    view = sim_pod({"metadata": {"namespace": "n", "name": "p", "uid": "u"},
                    "spec": {"initContainers": [{"name": "warmup"}], "containers": [{"name": "a"}]}},
                   "nvidia.com/gpu")
    running = running_status(view, "10.0.0.1")["status"]
    (warmup,) = running["initContainerStatuses"]
    assert warmup["name"] == "warmup" and warmup["state"]["terminated"]["containerID"] == "sim://u/warmup"
    assert [c["name"] for c in running["containerStatuses"]] == ["a"]
    (done,) = succeeded_status(view)["status"]["containerStatuses"]
    assert done["containerID"] == done["state"]["terminated"]["containerID"] == "sim://u/a"
    plain = sim_pod({"metadata": {"uid": "u"}, "spec": {"containers": [{"name": "a"}]}}, "nvidia.com/gpu")
    assert "initContainerStatuses" not in running_status(plain, "10.0.0.1")["status"]
