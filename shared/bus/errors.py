"""The one place where nats-py exceptions become gpubus errors (``raise ... from e``).

Callers of the bus see only :mod:`shared.errors` types: ``BusUnavailable`` (retry later; its
``NoResponders``: a request nobody serves now), ``CasConflict`` (someone else wrote first),
``QueryFailed`` (a responder failed a request), ``InvalidKey`` and ``EventRefused`` (bad input,
never retry).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import nats.errors
import nats.js.errors

from shared.errors import BadInput, BusUnavailable, CasConflict, GpubusError

#: Words in a server ``-ERR`` that mean our credentials were refused.
_AUTH_WORDS = ("authorization", "authentication")

#: JetStream API codes for "wrong last sequence" (a lost compare-and-set).
WRONG_LAST_SEQUENCE = frozenset({10071, 10164})


class InvalidKey(BadInput):
    """A KV key outside ``[-/_=.a-zA-Z0-9]+``."""


class NoResponders(BusUnavailable):
    """Nothing subscribes to a request's subject right now: NATS said so at once, nothing was sent.

    A responder that is about to subscribe (a replica taking over) may answer a retry."""


class QueryFailed(GpubusError):
    """A responder received the request and failed serving it (NATS micro's ``Nats-Service-Error``
    reply headers). Unlike ``BusUnavailable`` the request did arrive: the reply says why it failed."""


class EventRefused(BadInput):
    """NATS will never store this event (too large, refused by the stream, unencodable).

    Not a ``BusUnavailable``: resending it cannot succeed, and retrying would hold up every
    event queued behind it.
    """


#: nats-py errors on a publish that the same message would meet every time it is sent.
_PERMANENT_PUBLISH_ERRORS: tuple[type[Exception], ...] = (
    nats.errors.MaxPayloadError,
    nats.errors.BadSubjectError,
    nats.errors.BadHeaderError,
    nats.js.errors.BadRequestError,  # 400 from the stream: message too large, stream sealed, ...
)


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
        raise BusUnavailable(f"{what}: {_detail(e)}") from e
    except nats.errors.NoRespondersError as e:
        raise NoResponders(f"{what}: no responder is subscribed") from e
    except (nats.errors.Error, TimeoutError, OSError) as e:
        raise BusUnavailable(f"{what}: {_detail(e)}") from e


@contextmanager
def translated_publish(what: str) -> Iterator[None]:
    """:func:`translated` for a publish, where a refusal that would repeat raises ``EventRefused``."""
    with translated(what):
        try:
            yield
        except _PERMANENT_PUBLISH_ERRORS as e:
            raise EventRefused(f"{what}: {_detail(e)}") from e


def _detail(e: Exception) -> str:
    if isinstance(e, nats.js.errors.ServiceUnavailableError) and e.code is None:
        # nats-py's word for "no responders": nothing serves the JetStream API on this server
        return "JetStream is not available on this NATS server (is it running with JetStream enabled?)"
    if isinstance(e, nats.js.errors.APIError):
        codes = " ".join(f"{name} {value}" for name, value in (("status", e.code), ("code", e.err_code))
                         if value is not None)
        return f"JetStream error{f' ({codes})' if codes else ''}: {e.description or 'no description'}"
    return f"{type(e).__name__}: {e}"


def refusal_reason(e: BaseException) -> str | None:
    """Why a connect failure will repeat until the settings change, or None if it may be transient."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return "TLS certificate verification failed (is tls_ca the CA that signed the server certificate?)"
    if isinstance(e, ssl.SSLError):
        return "TLS handshake failed (check tls_ca, tls_cert, tls_key)"
    if isinstance(e, nats.errors.Error) and any(w in str(e).lower() for w in _AUTH_WORDS):
        return "credentials refused (check user/password, token, creds_file or nkey_seed_file)"
    return None
