"""AdmissionReview on the wire (``admission.k8s.io/v1`` and ``v1beta1``): typed shapes, decode, encode.

Decoding checks only what the webhook relies on (apiVersion, kind, ``request.uid``, a pod object)
and raises :class:`BadReview` naming what is wrong; encoding echoes the apiVersion and uid and
base64-encodes the JSONPatch. This module knows nothing about HTTP servers or admission rules.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict, cast

import orjson

from services.webhook.errors import BadRequestKind, BadReview

API_VERSIONS = frozenset({"admission.k8s.io/v1", "admission.k8s.io/v1beta1"})
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]

#: A Kubernetes object as JSON (the pod inside a review); walked with isinstance checks, never trusted.
KubeObject = Mapping[str, object]


class GroupVersionKind(TypedDict, total=False):
    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict, total=False):
    """``request`` of an AdmissionReview (fields the webhook reads; the rest pass through)."""

    uid: str
    kind: GroupVersionKind
    resource: Mapping[str, str]
    name: str
    namespace: str
    operation: Operation
    userInfo: Mapping[str, object]
    object: KubeObject
    oldObject: KubeObject | None
    dryRun: bool


class PatchOp(TypedDict):
    """One RFC 6902 operation (``value`` absent for ``remove``)."""

    op: Literal["add", "remove", "replace"]
    path: str
    value: NotRequired[object]


class Status(TypedDict, total=False):
    code: int
    message: str
    reason: str


class AdmissionResponse(TypedDict, total=False):
    uid: str
    allowed: bool
    status: Status
    patch: str
    patchType: Literal["JSONPatch"]
    warnings: list[str]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse


def decode_review(body: bytes) -> tuple[str, AdmissionRequest]:
    """Body bytes -> (apiVersion, request); :class:`BadReview` says why a body is unusable."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadReview(BadRequestKind.NOT_JSON, f"request body is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview":
        raise BadReview(BadRequestKind.NOT_A_REVIEW, "request body is not an AdmissionReview")
    api_version = doc.get("apiVersion")
    # isinstance first: a list or object is unhashable, so a set lookup would raise TypeError.
    if not isinstance(api_version, str) or api_version not in API_VERSIONS:
        shown = (
            f"of type {type(api_version).__name__}"
            if isinstance(api_version, list | dict)
            else repr(api_version)
        )
        raise BadReview(
            BadRequestKind.UNSUPPORTED_VERSION,
            f"unsupported AdmissionReview apiVersion {shown} (want one of {sorted(API_VERSIONS)})",
        )
    request = doc.get("request")
    if not isinstance(request, dict):
        raise BadReview(
            BadRequestKind.MISSING_REQUEST, "AdmissionReview has no request", api_version=api_version
        )
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview(
            BadRequestKind.MISSING_UID, "AdmissionReview request has no uid", api_version=api_version
        )
    obj = request.get("object")
    if request.get("operation") in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise BadReview(
            BadRequestKind.BAD_OBJECT,
            "AdmissionReview request.object must be an object",
            api_version=api_version,
            uid=uid,
        )
    return api_version, cast(AdmissionRequest, request)


def encode_response(
    api_version: str,
    uid: str,
    *,
    allowed: bool,
    patch: Sequence[PatchOp] = (),
    code: int = 200,
    message: str = "",
    warnings: Sequence[str] = (),
) -> bytes:
    """The AdmissionReview answer: same apiVersion, echoed uid, base64 JSONPatch when there is one."""
    response: AdmissionResponse = {"uid": uid, "allowed": allowed}
    if not allowed or message:
        response["status"] = {"code": code, "message": message}
    if patch:
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode()
        response["patchType"] = "JSONPatch"
    if warnings:
        response["warnings"] = list(warnings)
    review: AdmissionReview = {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
    return orjson.dumps(review)


def encode_failure(api_version: str, uid: str, code: int, message: str) -> bytes:
    """An AdmissionReview-shaped body for an HTTP error (400/413/500), as far as the request was read."""
    return encode_response(
        api_version or "admission.k8s.io/v1", uid, allowed=False, code=code, message=message
    )
