"""The scheduler's errors, grouped by what the extender answers and whether a retry may help.

The extender HTTP layer maps these to its protocol in one place (``extender.py``); nothing
else decides status codes or ``Error`` strings.
"""

from __future__ import annotations

from shared.errors import BadInput, GpubusError, Retryable


class ExtenderInputError(BadInput):
    """A request body kube-scheduler (or anyone) sent is unusable; ``kind`` labels the metric."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class BindError(GpubusError):
    """A bind could not be completed; ``outcome`` labels the decisions metric. Nothing is left held."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class NotLeader(Retryable):
    """This replica is a standby; only the leader binds."""


class NotReady(Retryable):
    """State is not loaded yet (inventory and ledger), so no decision would be correct."""


class TLSConfigError(BadInput):
    """The extender's certificate, key or client CA cannot be used (the scheduler does not start)."""
