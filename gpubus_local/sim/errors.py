"""Errors of the simulated cluster: ``ApiError`` carries the exact ``metav1.Status`` to answer with.

The store, selectors, patches and admission raise ``ApiError``; the HTTP layer turns it into the
status code and Status body in one place. Nothing here knows aiohttp.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpubus_local.sim.field_errors import FieldError, aggregate
from shared.errors import BadInput, GpubusError
from shared.kube_types import Status


class SimError(GpubusError):
    """Base of the simulator's own errors."""


class PatchError(SimError, BadInput):
    """A JSON patch or merge patch cannot be applied to the document."""


class ApiError(SimError):
    """An API request fails with ``code``/``reason`` (the real server's reasons)."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> Status:
        body: Status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details  # type: ignore[typeddict-item]
        return body

    @classmethod
    def bad_request(cls, message: str) -> ApiError:
        return cls(400, "BadRequest", message)

    @classmethod
    def not_found(cls, resource: str, name: str) -> ApiError:
        return cls(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})

    @classmethod
    def already_exists(cls, resource: str, name: str) -> ApiError:
        return cls(409, "AlreadyExists", f'{resource} "{name}" already exists',
                   {"name": name, "kind": resource})

    @classmethod
    def conflict(cls, resource: str, name: str, why: str) -> ApiError:
        return cls(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": {why}',
                   {"name": name, "kind": resource})

    @classmethod
    def invalid(cls, resource: str, name: str, why: str) -> ApiError:
        return cls(422, "Invalid", f'{resource} "{name}" is invalid: {why}', {"name": name, "kind": resource})

    @classmethod
    def invalid_fields(cls, kind: str, name: str, errors: Sequence[FieldError], group: str = "") -> ApiError:
        """The real ``errors.NewInvalid``: ``Kind.group "name" is invalid: <errors>`` with one cause each;
        an empty name, group or kind is left out of the details, as the real JSON omits it."""
        qualified = f"{kind}.{group}" if group else kind
        details: dict[str, Any] = {"name": name} if name else {}
        if group:
            details["group"] = group
        if kind:
            details["kind"] = kind
        details["causes"] = [error.cause() for error in errors]
        return cls(422, "Invalid", f'{qualified} "{name}" is invalid: {aggregate(list(errors))}', details)

    @classmethod
    def gone(cls, message: str) -> ApiError:
        return cls(410, "Expired", message)

    @classmethod
    def forbidden(cls, message: str) -> ApiError:
        return cls(403, "Forbidden", message)

    @classmethod
    def internal(cls, message: str) -> ApiError:
        return cls(500, "InternalError", f"Internal error occurred: {message}")
