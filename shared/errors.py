"""Errors shared by every package, grouped by what the caller should do about them.

``Retryable`` means "try again later" (the bus is down, a lease is held); ``BadInput``
means the input is at fault and retrying the same input will fail the same way.
"""

from __future__ import annotations


class GpubusError(Exception):
    """Base of every error gpubus raises on purpose."""


class Retryable(GpubusError):
    """A transient condition: the same call may succeed later."""


class BadInput(GpubusError):
    """The input is malformed or violates the contract; never retry it unchanged."""


class EventDecodeError(BadInput):
    """An event body could not be decoded (malformed, too large, unknown kind or version)."""


class AnnotationError(BadInput):
    """A HAMi annotation value does not follow its encoding."""


class RequestError(BadInput):
    """A container's GPU resource quantities are invalid."""


class BusUnavailable(Retryable):
    """NATS cannot be reached right now."""


class BusRefused(BusUnavailable):
    """NATS refused us (credentials, TLS) or the bus settings are unusable; fix the settings.

    A ``BusUnavailable`` so callers that only handle outages still stop cleanly.
    """


class LeaseHeld(Retryable):
    """A KV lease (node lock, leader lease) is owned by someone else."""


class LeaseLost(GpubusError):
    """A lease we held was taken over or expired; the holder must stop acting on it."""


class CasConflict(Retryable):
    """A KV compare-and-set lost against a concurrent writer."""


class Fenced(CasConflict):
    """A fenced KV write was refused: the key it was fenced on (a leader's term) has moved on since.

    The writer's term is over; it must act on nothing it decided in that term.
    """


class TaskDied(GpubusError):
    """A task the service cannot run without (a root task) ended on its own: the service stops."""


def clip(text: str, limit: int = 120) -> str:
    """Outside input shown in a log line or an error message: cut to ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"
