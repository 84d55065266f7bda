"""The one place where nats-py exceptions become gpubus errors (``raise ... from e``).

Callers of the bus see only :mod:`shared.errors` types: ``BusUnavailable`` (retry later),
``CasConflict`` (someone else wrote first), ``InvalidKey`` (bad input, never retry).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import nats.errors
import nats.js.errors

from shared.errors import BadInput, BusUnavailable, CasConflict

#: JetStream API codes for "wrong last sequence" (a lost compare-and-set).
WRONG_LAST_SEQUENCE = frozenset({10071, 10164})


class InvalidKey(BadInput):
    """A KV key outside ``[-/_=.a-zA-Z0-9]+``."""


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Run a NATS call; re-raise its failures as gpubus errors naming ``what`` was attempted."""
    try:
        yield
    except nats.js.errors.KeyWrongLastSequenceError as e:
        raise CasConflict(f"{what}: revision changed concurrently") from e
    except nats.js.errors.InvalidKeyError as e:
        raise InvalidKey(f"{what}: invalid key") from e
    except nats.js.errors.APIError as e:
        if e.err_code in WRONG_LAST_SEQUENCE:
            raise CasConflict(f"{what}: revision changed concurrently") from e
        raise BusUnavailable(f"{what}: JetStream error {e.code} {e.err_code}: {e.description}") from e
    except (nats.errors.Error, TimeoutError, OSError) as e:
        raise BusUnavailable(f"{what}: {type(e).__name__}: {e}") from e
