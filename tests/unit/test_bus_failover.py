"""Which errors a leader election produces, and how a call is tried again through them.

Case matrix: is_transient over nats-py's errors (timeouts, no responders, a stream's 503,
reconnecting: yes; a 400, a wrong last sequence, a closed connection: no); through_failover
returns the first success after transient failures, raises a permanent error at once, and
raises the last transient error once ``within_s`` has passed.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from shared.bus.failover import is_transient, through_failover


@pytest.mark.parametrize(("error", "transient"), [
    (nats.errors.TimeoutError(), True),
    (nats.errors.NoRespondersError(), True),
    (nats.js.errors.NoStreamResponseError(), True),
    (nats.errors.ConnectionReconnectingError(), True),
    (nats.errors.UnexpectedEOF(), True),
    (nats.js.errors.ServiceUnavailableError(code=503, err_code=10008), True),
    (nats.js.errors.BadRequestError(code=400, err_code=10071), False),
    (nats.js.errors.ServerError(code=500, err_code=10074), False),
    (nats.errors.ConnectionClosedError(), False),
    (ValueError("bug"), False),
])
def test_transient_errors_are_those_of_an_election_or_a_reconnect(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


class Flaky:
    """Fails with ``errors`` in turn, then returns the number of calls."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.calls


async def test_a_call_is_tried_again_through_transient_errors() -> None:
    call = Flaky(nats.js.errors.NoStreamResponseError(), nats.errors.TimeoutError())
    assert await through_failover(call, within_s=5.0, what="t") == 3


async def test_a_permanent_error_is_raised_at_the_first_try() -> None:
    call = Flaky(nats.js.errors.BadRequestError(code=400, err_code=10071))
    with pytest.raises(nats.js.errors.BadRequestError):
        await through_failover(call, within_s=5.0, what="t")
    assert call.calls == 1


async def test_without_a_failover_window_a_transient_error_is_raised_at_once() -> None:
    call = Flaky(nats.errors.TimeoutError())
    with pytest.raises(nats.errors.TimeoutError):
        await through_failover(call, within_s=0.0, what="t")
    assert call.calls == 1
