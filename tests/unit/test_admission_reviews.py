"""AdmissionReview codec and the event a decision becomes.

Cases: v1 and v1beta1 echoed; uid echoed; patch base64 JSON with patchType only when present;
status only for denials or messages; warnings; failures shaped as reviews; events for GPU pods,
denials, dry runs and pods that are not gpubus's.
"""

from __future__ import annotations

import base64

import orjson
import pytest
from admission_builders import container, pod, request, run

from services.webhook.errors import BadRequestKind, BadReview
from services.webhook.events import event_for
from services.webhook.reviews import decode_review, encode_failure, encode_response
from shared.events import PodAdmitted, PodRejected


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_decode_returns_the_version_and_request(api_version: str) -> None:
    body = orjson.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "request": request(pod())})
    version, req = decode_review(body)
    assert version == api_version and req["uid"] == request(pod())["uid"]


def test_decode_names_what_is_wrong() -> None:
    with pytest.raises(BadReview) as info:
        decode_review(b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}')
    assert info.value.kind is BadRequestKind.MISSING_UID and "uid" in info.value.message


def test_allowed_response_with_patch() -> None:
    ops = [{"op": "add", "path": "/spec/x", "value": 1}]
    doc = orjson.loads(
        encode_response(
            "admission.k8s.io/v1beta1",
            "u1",
            allowed=True,
            patch=ops,  # type: ignore[arg-type]
            warnings=["w"],
        )
    )
    assert doc["apiVersion"] == "admission.k8s.io/v1beta1" and doc["kind"] == "AdmissionReview"
    response = doc["response"]
    assert (response["uid"], response["allowed"], response["patchType"], response["warnings"]) == (
        "u1",
        True,
        "JSONPatch",
        ["w"],
    )
    assert orjson.loads(base64.b64decode(response["patch"])) == ops
    assert "status" not in response


def test_denied_response_has_a_status_and_no_patch() -> None:
    doc = orjson.loads(encode_response("admission.k8s.io/v1", "u1", allowed=False, code=403, message="no"))
    assert doc["response"] == {"uid": "u1", "allowed": False, "status": {"code": 403, "message": "no"}}


def test_failure_without_a_known_version_defaults_to_v1() -> None:
    doc = orjson.loads(encode_failure("", "", 413, "too big"))
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["response"]["status"]["code"] == 413


def test_admitted_gpu_pod_becomes_pod_admitted() -> None:
    obj = pod(container(limits={"nvidia.com/gpu": 1}))
    event = event_for(run(obj), request(obj), "webhook")
    assert isinstance(event, PodAdmitted)
    assert (event.namespace, event.name, event.scheduler_name, event.source) == (
        "ns",
        "p",
        "gpubus-scheduler",
        "webhook",
    )
    assert "/spec/schedulerName" in event.mutations and event.requests[0] is not None


def test_denial_becomes_pod_rejected_with_the_users_message() -> None:
    obj = pod()
    event = event_for(run(obj), request(obj))
    assert isinstance(event, PodRejected) and event.reason == "pod has no containers"


def test_generate_name_stands_in_for_the_name() -> None:
    obj = pod(container(limits={"nvidia.com/gpu": 1}))
    obj["metadata"] = {"generateName": "train-"}
    event = event_for(run(obj), request(obj))
    assert event is not None and event.name == "train-"  # type: ignore[attr-defined]


def test_dry_runs_and_pods_without_gpu_make_no_event() -> None:
    gpu = pod(container(limits={"nvidia.com/gpu": 1}))
    dry = request(gpu)
    dry["dryRun"] = True
    assert event_for(run(gpu), dry) is None
    plain = pod(container())
    assert event_for(run(plain), request(plain)) is None


def test_pod_admitted_keeps_every_container_slot_when_the_gpu_container_is_not_first() -> None:
    obj = pod(container("proxy"), container("train", limits={"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000}))
    req = request(obj)
    event = event_for(run(obj), req, "webhook")
    assert isinstance(event, PodAdmitted)
    assert (event.namespace, event.name, event.scheduler_name, event.source) == (
        "ns",
        "p",
        "gpubus-scheduler",
        "webhook",
    )
    assert event.requests[0] is None
    assert event.requests[1] is not None and (event.requests[1].nums, event.requests[1].memreq) == (2, 3000)
    assert "/spec/schedulerName" in event.mutations


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_reviews_with_a_null_object_make_no_event_and_do_not_crash(operation: str) -> None:
    req = request(pod(container()), operation=operation)
    req["object"] = None  # type: ignore[typeddict-item]
    assert event_for(run(pod(container()), operation=operation), req) is None
