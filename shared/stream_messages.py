"""One message of the ``GPUBUS`` stream as stored: sequence, stream time, subject and body.

What :mod:`shared.bus.stream` hands its readers; a plain value (no NATS type), so pure cores such
as the dashboard's timeline fold it without importing the bus.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    """One stream message as the bus read it."""

    seq: int
    at: float
    """Stream time (unix seconds) the server stored it."""
    subject: str
    data: bytes
