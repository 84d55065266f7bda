"""NATS JWTs (``alg: ed25519-nkey``): encode, sign, decode and verify, as nats-io/jwt v2 does.

The auth callout speaks three of them: the server's authorization request (signed by the server's
nkey), our authorization response and the user JWT inside it (both signed by the issuer account's
nkey). The format is small: ``base64url(header).base64url(claims).base64url(ed25519 signature)``
with header ``{"typ":"JWT","alg":"ed25519-nkey"}`` and ``jti`` the unpadded base32 of the SHA-512/256
of the standard claims serialised without it. Signing uses the ``nkeys`` package; verifying a key we
hold only as a public nkey (``N...``, ``A...``) uses PyNaCl, which ``nkeys`` is built on (it has no
public-key-only verify). The PyPI libraries for NATS JWTs (``nats-jwt``, ``nats-callout``) call
themselves untested or pin beta dependencies, so these ~150 lines are ours.

Pure: no I/O, no clock (callers pass ``now``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
#: nats-io/jwt refuses larger tokens; so do we, before decoding anything.
MAX_TOKEN_BYTES = 1 << 20
#: The claims a nats-io/jwt ClaimsData holds, in its JSON field order (the ``jti`` hash covers them).
_STANDARD = ("aud", "exp", "jti", "iat", "iss", "name", "nbf", "sub")

PREFIX_SERVER = "N"
PREFIX_ACCOUNT = "A"
PREFIX_USER = "U"
_PREFIX_BYTES = {PREFIX_SERVER: nkeys.PREFIX_BYTE_SERVER, PREFIX_ACCOUNT: nkeys.PREFIX_BYTE_ACCOUNT,
                 PREFIX_USER: nkeys.PREFIX_BYTE_USER}


class JwtError(ValueError):
    """A token that is not a well-formed, correctly signed NATS JWT."""


@dataclass(frozen=True, slots=True)
class Signer:
    """An nkey seed that signs; ``public_key`` is its ``A...``/``U...``/``N...`` public nkey."""

    keypair: nkeys.KeyPair
    public_key: str

    @classmethod
    def from_seed(cls, seed: bytes | str) -> Signer:
        raw = seed.encode() if isinstance(seed, str) else seed
        try:
            kp = nkeys.from_seed(bytearray(raw.strip()))
            public = kp.public_key.decode()
        except (nkeys.NkeysError, binascii.Error, ValueError) as e:
            raise JwtError(f"not an nkey seed: {type(e).__name__}") from None
        return cls(kp, public)

    @classmethod
    def generate(cls, prefix: str) -> Signer:
        """A fresh key of kind ``prefix`` (``A`` account, ``U`` user, ``N`` server)."""
        return cls.from_seed(nkeys.encode_seed(secrets.token_bytes(32), _PREFIX_BYTES[prefix]))

    @property
    def seed(self) -> bytes:
        return bytes(self.keypair.seed)

    def __repr__(self) -> str:
        return f"Signer({self.public_key})"  # never the seed


def is_public_key(value: object, prefix: str) -> bool:
    """True for a valid public nkey of kind ``prefix`` (checksum and prefix byte checked)."""
    try:
        _raw_public_key(value, prefix)
    except JwtError:
        return False
    return True


def _raw_public_key(value: object, prefix: str) -> bytes:
    if not isinstance(value, str) or len(value) != 56 or not value.startswith(prefix):
        raise JwtError(f"not a public nkey of kind {prefix}")
    try:
        decoded = base64.b32decode(value)
    except (binascii.Error, ValueError):
        raise JwtError("public nkey is not base32") from None
    body, crc = decoded[:-2], decoded[-2:]
    if len(body) != 33 or nkeys.crc16_checksum(body) != crc or body[0] != _PREFIX_BYTES[prefix]:
        raise JwtError(f"not a public nkey of kind {prefix}")
    return bytes(body[1:])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise JwtError("a part is not base64url") from None


def _jti(claims: Mapping[str, Any]) -> str:
    standard = {k: claims[k] for k in _STANDARD if claims.get(k) and k != "jti"}
    digest = hashlib.new("sha512_256", json.dumps(standard, separators=(",", ":")).encode()).digest()
    return base64.b32encode(digest).rstrip(b"=").decode()


def encode(claims: Mapping[str, Any], signer: Signer, *, now: int) -> str:
    """Sign ``claims`` (``sub`` required; ``iss``, ``iat`` and ``jti`` are set here)."""
    if not claims.get("sub"):
        raise JwtError("claims need a subject")
    body = {k: v for k, v in claims.items() if v not in (None, "", 0) or k == "nats"}
    body["iss"] = signer.public_key
    body["iat"] = now
    body["jti"] = _jti(body)
    signing_input = f"{_b64(json.dumps(HEADER).encode())}.{_b64(json.dumps(body).encode())}"
    signature = signer.keypair.sign(signing_input.encode())
    return f"{signing_input}.{_b64(signature)}"


def decode(token: str | bytes, *, issuer_prefix: str, now: int) -> dict[str, Any]:
    """The verified claims of ``token``, signed by the public nkey in its own ``iss``.

    Checks the header, the issuer's kind, the signature and ``exp``/``nbf``; whether the issuer
    is one to trust is the caller's question.
    """
    if isinstance(token, bytes):
        try:
            token = token.decode()
        except UnicodeDecodeError:
            raise JwtError("token is not text") from None
    if len(token) > MAX_TOKEN_BYTES:
        raise JwtError(f"token of {len(token)} bytes exceeds {MAX_TOKEN_BYTES}")
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise JwtError("expected 3 dot-separated parts")
    header, claims = _json_object(parts[0], "header"), _json_object(parts[1], "claims")
    if str(header.get("typ", "")).upper() != "JWT" or str(header.get("alg", "")).lower() != HEADER["alg"]:
        raise JwtError(f"not an ed25519-nkey JWT: header {header}")
    key = _raw_public_key(claims.get("iss"), issuer_prefix)
    try:
        nacl.signing.VerifyKey(key).verify(f"{parts[0]}.{parts[1]}".encode(), _unb64(parts[2]))
    except (nacl.exceptions.BadSignatureError, ValueError):
        raise JwtError("signature does not verify") from None
    if _number(claims, "exp") and now > _number(claims, "exp"):
        raise JwtError("token has expired")
    if _number(claims, "nbf") and _number(claims, "nbf") > now:
        raise JwtError("token is not valid yet")
    return claims


def _json_object(part: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(_unb64(part))
    except (UnicodeDecodeError, ValueError):
        raise JwtError(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise JwtError(f"{what} is not a JSON object")
    return value


def _number(claims: Mapping[str, Any], name: str) -> int:
    value = claims.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise JwtError(f"claim {name} is not an integer")
    return value
