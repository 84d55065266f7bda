"""Errors of the Kubernetes port, by what the caller should do; and the HTTP status -> error table.

``shared.kube`` converts every API server failure into one of these, once, at the adapter boundary.
"""

from __future__ import annotations

from shared.errors import BadInput, GpubusError, Retryable


class KubeError(GpubusError):
    """An API server call failed; ``code``/``reason`` come from the returned ``Status`` when any."""

    def __init__(self, message: str, *, code: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class NotFound(KubeError, BadInput):
    """404: the object (or its namespace) does not exist."""


class Conflict(KubeError, Retryable):
    """409: stale resourceVersion, already exists, or already bound; re-read and decide again."""


class Gone(KubeError, Retryable):
    """410: the resourceVersion is too old for a watch; re-list and watch from the list's rv."""


class KubeUnavailable(KubeError, Retryable):
    """The API server cannot be reached, timed out, throttled (429) or failed (5xx)."""


class KubeRejected(KubeError, BadInput):
    """400/401/403/422 and the like: the request itself was refused; do not retry it unchanged."""


_ERROR_BY_STATUS: dict[int, type[KubeError]] = {
    404: NotFound,
    409: Conflict,
    410: Gone,
    429: KubeUnavailable,
}


def error_for(code: int, message: str, reason: str = "") -> KubeError:
    """The gpubus error for an HTTP status (also used for watch ``ERROR`` events)."""
    default = KubeUnavailable if code >= 500 or code == 0 else KubeRejected
    return _ERROR_BY_STATUS.get(code, default)(message, code=code, reason=reason)
