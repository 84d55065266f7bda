"""The auth callout exchange (ADR-26), pure: read the server's request, write our response.

nats-server sends every connection that no static user covers to ``$SYS.REQ.USER.AUTH`` as an
authorization request JWT signed by the server's nkey (``iss`` = ``nats.server_id.id``, ``aud``
``nats-authorization-request``), naming a fresh user nkey (``nats.user_nkey``) and carrying the
client's CONNECT options (``nats.connect_opts``: ``auth_token``, ``user``/``pass``, ``jwt``...).
The answer is an authorization response JWT signed by the configured issuer account key, ``sub`` =
that user nkey, ``aud`` = the server's id, holding either ``nats.jwt`` (a user JWT for the same
user nkey, ``aud`` = the account to place it in) or ``nats.error``.

Knows nothing about Kubernetes: :mod:`services.authn.identity` says who a token belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.authn import nkeyjwt
from services.authn.permissions import Permissions

REQUEST_AUDIENCE = "nats-authorization-request"
NO_LIMIT = -1
#: What a user JWT's ``nats.resp.ttl`` is counted in (a Go ``time.Duration``).
_NS = 1_000_000_000


class BadRequest(ValueError):
    """A callout request we cannot answer (not from a server, malformed, expired)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthRequest:
    """What we use of the server's authorization request."""

    server_id: str
    user_nkey: str
    token: str
    """The client's bearer token: CONNECT ``auth_token``, else ``pass`` (never logged)."""
    client: str
    """``name@host`` of the connecting client, for logs."""

    def __repr__(self) -> str:
        return f"AuthRequest(server={self.server_id[:8]}, user={self.user_nkey[:8]}, client={self.client})"


def parse_request(payload: bytes, *, now: int) -> AuthRequest:
    """The verified request in ``payload``; :class:`BadRequest` says why not."""
    try:
        claims = nkeyjwt.decode(payload, issuer_prefix=nkeyjwt.PREFIX_SERVER, now=now)
    except nkeyjwt.JwtError as e:
        raise BadRequest(f"not a server-signed authorization request: {e}") from None
    nats = claims.get("nats")
    if not isinstance(nats, dict) or nats.get("type") != "authorization_request":
        raise BadRequest("not an authorization request claim")
    server = nats.get("server_id")
    server_id = server.get("id") if isinstance(server, dict) else None
    if server_id != claims.get("iss"):
        raise BadRequest("signed by another key than the server it names")
    user_nkey = nats.get("user_nkey")
    if not nkeyjwt.is_public_key(user_nkey, nkeyjwt.PREFIX_USER):
        raise BadRequest("user_nkey is not a user public key")
    opts, info = _object(nats.get("connect_opts")), _object(nats.get("client_info"))
    token = opts.get("auth_token") or opts.get("pass") or ""
    return AuthRequest(server_id=str(server_id), user_nkey=str(user_nkey),
                       token=token if isinstance(token, str) else "",
                       client=f"{str(opts.get('name') or '-')[:64]}@{str(info.get('host') or '-')[:64]}")


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def user_claims(request: AuthRequest, permissions: Permissions, *, name: str, account: str,
                expires: int | None) -> dict[str, Any]:
    """The user JWT's claims: this connection, placed in ``account``, with ``permissions``."""
    nats: dict[str, Any] = {
        "pub": {"allow": list(permissions.publish)},
        "sub": {"allow": list(permissions.subscribe)},
        "subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT,
        "type": "user", "version": 2,
    }
    if permissions.responses:
        nats["resp"] = {"max": permissions.responses, "ttl": 5 * _NS}
    return {"sub": request.user_nkey, "aud": account, "name": name, "exp": expires, "nats": nats}


def response(request: AuthRequest, issuer: nkeyjwt.Signer, *, now: int, user_jwt: str = "",
             error: str = "") -> bytes:
    """The signed authorization response: ``user_jwt`` lets the client in, ``error`` refuses it."""
    nats: dict[str, Any] = {"type": "authorization_response", "version": 2}
    if user_jwt:
        nats["jwt"] = user_jwt
    else:
        nats["error"] = error or "not authorized"
    claims = {"sub": request.user_nkey, "aud": request.server_id, "nats": nats}
    return nkeyjwt.encode(claims, issuer, now=now).encode()


def allow(request: AuthRequest, issuer: nkeyjwt.Signer, permissions: Permissions, *, name: str,
          account: str, expires: int | None, now: int) -> bytes:
    """The response that lets ``request``'s client in as ``name`` with ``permissions``."""
    user = nkeyjwt.encode(user_claims(request, permissions, name=name, account=account, expires=expires),
                          issuer, now=now)
    return response(request, issuer, now=now, user_jwt=user)
