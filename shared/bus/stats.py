"""Counters the bus keeps so each service can export them as Prometheus metrics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class BusStats:
    """Monotonic counters since the bus was connected (read them, never reset them)."""

    published: int = 0
    """Events acknowledged by JetStream (publish and emit)."""
    dropped: int = 0
    """Events the outbox dropped because it was full (NATS down too long) or closed."""
    refused: int = 0
    """Events NATS can never store (over max_payload, refused by the stream, unencodable): dropped
    at once, never retried. Apart from ``dropped``: a bug or bad input, not an outage."""
    retries: int = 0
    """Outbox publish attempts that failed and were retried."""
    decode_errors: int = 0
    """Messages consumers could not decode (logged, acked, skipped)."""
    handler_errors: int = 0
    """Handler exceptions: an event nak'd for redelivery or terminated, or a request answered with
    an error."""
    consumed: int = 0
    """Messages handled successfully and acked."""
    disconnects: int = 0
    """Times the connection to NATS was lost."""
    reconnects: int = 0
    """Times it was re-established."""
