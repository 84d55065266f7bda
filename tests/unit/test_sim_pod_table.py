"""The pod rows of the stand-in's ``kubectl get pods`` Table: the STATUS column as kubectl's pod printer
writes it, from the statuses the simulated kubelet itself writes.

Case matrix: an unscheduled pod (PodScheduled=False) is ``Pending``, never a made-up word; a running
pod ``Running`` (its completed init containers do not show); a Succeeded pod ``Completed``, the
reason of its terminated containers; a pod refused at admission its reason; an init container still
running ``Init:0/1``, one that failed ``Init:Error``; a waiting container its reason
(``ContainerCreating``); a terminated container without a reason its exit code or signal; a deleted
pod ``Terminating``; RESTARTS sums the containers' restart counts.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpubus_local.sim.kubelet import SimContainer, SimPod
from gpubus_local.sim.node import failed_status, running_status, succeeded_status
from gpubus_local.sim.tables import as_table

SIM = SimPod(namespace="default", name="p", uid="u-1",
             containers=(SimContainer(name="warmup", init=True), SimContainer(name="main", gpus=1)))


def pod(status: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", **metadata},
            "spec": {"initContainers": [{"name": "warmup"}], "containers": [{"name": "main"}],
                     **({"nodeName": "node-1"} if status.get("phase") != "Pending" else {})},
            "status": status}


def cells(obj: dict[str, Any]) -> dict[str, Any]:
    table = as_table("pods", [obj], "7")
    names = [c["name"] for c in table["columnDefinitions"]]
    [row] = table["rows"]
    return dict(zip(names, row["cells"], strict=True))


def test_an_unschedulable_pod_is_pending_as_on_a_real_cluster() -> None:
    unscheduled = pod({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes"}]})
    assert cells(unscheduled)["Status"] == "Pending"


def test_the_kubelets_own_statuses_print_running_completed_and_the_admission_reason() -> None:
    assert cells(pod(running_status(SIM, "10.0.0.1")["status"]))["Status"] == "Running"
    assert cells(pod(succeeded_status(SIM)["status"]))["Status"] == "Completed"
    assert cells(pod(failed_status("no GPU")["status"]))["Status"] == "UnexpectedAdmissionError"


def waiting(reason: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason}}


def terminated(code: int, reason: str = "", signal: int = 0) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, **({"reason": reason} if reason else {}),
                           **({"signal": signal} if signal else {})}}


@pytest.mark.parametrize(("init", "main", "status"), [
    ({"running": {}}, waiting("PodInitializing"), "Init:0/1"),
    (terminated(1, "Error"), waiting("PodInitializing"), "Init:Error"),
    (terminated(0, "Completed"), waiting("ContainerCreating"), "ContainerCreating"),
    (terminated(0, "Completed"), terminated(137, signal=9), "Signal:9"),
    (terminated(0, "Completed"), terminated(3), "ExitCode:3"),
], ids=["init-running", "init-failed", "creating", "signal", "exit-code"])
def test_container_states_give_the_status_kubectl_shows(init: dict[str, Any], main: dict[str, Any],
                                                         status: str) -> None:
    obj = pod({"phase": "Pending" if "waiting" in main else "Failed",
               "initContainerStatuses": [{"name": "warmup", "state": init, "restartCount": 1}],
               "containerStatuses": [{"name": "main", "state": main, "restartCount": 2}]})
    row = cells(obj)
    assert row["Status"] == status
    assert row["Restarts"] == (1 if status.startswith("Init:") else 2)


def test_a_deleted_pod_is_terminating() -> None:
    running = pod(running_status(SIM, "10.0.0.1")["status"], deletionTimestamp="2026-01-01T00:00:00Z")
    assert cells(running)["Status"] == "Terminating"
