"""Errors of the webhook, grouped by who is at fault and how the HTTP edge answers them.

The aiohttp handler maps these to HTTP status codes in exactly one place (``server.py``).
"""

from __future__ import annotations

from enum import StrEnum

from shared.errors import BadInput


class BadRequestKind(StrEnum):
    """Why a request body is not a usable AdmissionReview (the ``kind`` label of the metric)."""

    TOO_LARGE = "too_large"
    NOT_JSON = "not_json"
    NOT_A_REVIEW = "not_a_review"
    UNSUPPORTED_VERSION = "unsupported_version"
    MISSING_REQUEST = "missing_request"
    MISSING_UID = "missing_uid"
    BAD_OBJECT = "bad_object"
    BAD_ENCODING = "bad_encoding"
    """A Content-Encoding the webhook does not know, or a body that does not decode with it."""


class BadReview(BadInput):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400, or 413 when too large)."""

    def __init__(self, kind: BadRequestKind, message: str, *, api_version: str = "", uid: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.api_version = api_version
        self.uid = uid


class MalformedPod(BadInput):
    """The pod inside a review has a shape no API server would send (denied, never crashes)."""
