"""Service-account tokens of the API server stand-in: TokenRequest and TokenReview, as the real one.

gpubus's auth callout (``services/authn``) asks the API server whether a node pod's projected token
is valid (``POST /apis/authentication.k8s.io/v1/tokenreviews``); a kubelet gets such a token with a
TokenRequest (``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token``, bound to a pod). The
stand-in issues JWTs with the real claims (``aud``, ``exp``, ``sub`` = ``system:serviceaccount:ns:sa``,
``kubernetes.io.pod``/``node``), HMAC-signed with a key of its own (it reviews only its own tokens),
and reviews them as the real authenticator does: signature, expiry, audience, and a bound pod
that must still exist with the same UID. Nothing else about service accounts is simulated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.handlers import json_response, read_json
from gpubus_local.sim.store import Store

ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The API server's own audience: a review or request without audiences means this one.
API_AUDIENCE = ISSUER
_HEADER = {"alg": "HS256", "typ": "JWT"}
MAX_EXPIRATION_S = 365 * 24 * 3600
MIN_EXPIRATION_S = 600
#: TokenRequest's path: served for per-node identity (what ``gpubus up`` needs), but not in discovery
#: or the OpenAPI document, whose kubectl fidelity is frozen (kubectl never asks for it there).
TOKEN_REQUEST_PATH = "/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class ServiceAccountTokens:
    """Issues and reviews tokens against the pods in ``store``."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._key = secrets.token_bytes(32)
        self._clock = clock

    def _sign(self, signing_input: str) -> str:
        return _b64(hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest())

    def issue(self, namespace: str, service_account: str, *, audiences: list[str], expiration_s: int,
              pod: tuple[str, str] | None = None, issued_at: float | None = None) -> tuple[str, int]:
        """A signed token and its expiry; ``pod`` = (name, uid) binds it (its node is recorded too).
        ``issued_at`` (default now) lets a test hold a token issued long ago."""
        now = int(self._clock() if issued_at is None else issued_at)
        exp = now + expiration_s
        account = {"name": service_account, "uid": _uid(namespace, service_account)}
        k8s: dict[str, Any] = {"namespace": namespace, "serviceaccount": account}
        if pod is not None:
            found = self._store.find("pods", namespace, pod[0])
            if found is None or found["metadata"].get("uid") != pod[1]:
                raise ApiError.not_found("pods", pod[0])
            k8s["pod"] = {"name": pod[0], "uid": pod[1]}
            node = found.get("spec", {}).get("nodeName")
            if node:
                k8s["node"] = {"name": node, "uid": _uid("node", node)}
        claims = {"aud": audiences, "exp": exp, "iat": now, "nbf": now, "iss": ISSUER,
                  "jti": secrets.token_hex(16), "kubernetes.io": k8s,
                  "sub": f"system:serviceaccount:{namespace}:{service_account}"}
        signing_input = f"{_b64(json.dumps(_HEADER).encode())}.{_b64(json.dumps(claims).encode())}"
        return f"{signing_input}.{self._sign(signing_input)}", exp

    def review(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """A TokenReview ``status``: ``authenticated`` and the user, or the ``error`` the real one gives."""
        try:
            claims = self._verified(token)
            user = self._user(claims, audiences or [API_AUDIENCE])
        except _Invalid as e:
            return {"user": {}, "error": f"[invalid bearer token, {e}]"}
        wanted = audiences or [API_AUDIENCE]
        return {"authenticated": True, "user": user, "audiences": [a for a in wanted if a in claims["aud"]]}

    def _verified(self, token: str) -> dict[str, Any]:
        parts = token.split(".")
        if len(parts) != 3 or not hmac.compare_digest(self._sign(f"{parts[0]}.{parts[1]}"), parts[2]):
            raise _Invalid("token lookup failed")  # what the real chain says of a token none of it knows
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except (binascii.Error, ValueError):
            raise _Invalid("token lookup failed") from None
        if not isinstance(claims, dict):
            raise _Invalid("token lookup failed")
        return claims

    def _user(self, claims: dict[str, Any], audiences: list[str]) -> dict[str, Any]:
        if int(self._clock()) >= claims["exp"]:
            raise _Invalid("service account token has expired")
        if not set(audiences) & set(claims["aud"]):
            raise _Invalid(f"token audiences {json.dumps(claims['aud'])} is invalid for the target audiences "
                           f"{json.dumps(audiences)}")
        k8s = claims["kubernetes.io"]
        namespace = k8s["namespace"]
        extra: dict[str, list[str]] = {}
        if "pod" in k8s:
            pod = self._store.find("pods", namespace, k8s["pod"]["name"])
            if pod is None or pod["metadata"].get("uid") != k8s["pod"]["uid"]:
                raise _Invalid(f'pod "{k8s["pod"]["name"]}" not found')
            extra["authentication.kubernetes.io/pod-name"] = [k8s["pod"]["name"]]
            extra["authentication.kubernetes.io/pod-uid"] = [k8s["pod"]["uid"]]
        if "node" in k8s:
            extra["authentication.kubernetes.io/node-name"] = [k8s["node"]["name"]]
            extra["authentication.kubernetes.io/node-uid"] = [k8s["node"]["uid"]]
        extra["authentication.kubernetes.io/credential-id"] = [f"JTI={claims['jti']}"]
        return {"username": claims["sub"], "uid": k8s["serviceaccount"]["uid"],
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                           "system:authenticated"],
                "extra": extra}


class _Invalid(Exception):
    pass


def _uid(*names: str) -> str:
    digest = hashlib.sha256("/".join(names).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _strings(value: object, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError.bad_request(f"{field}: expected a list of strings")
    return list(value)


def add_token_routes(router: web.UrlDispatcher, tokens: ServiceAccountTokens) -> None:
    """``tokenreviews`` (create) and ``serviceaccounts/{name}/token`` (create)."""

    async def token_review(request: web.Request) -> web.Response:
        body = await read_json(request)
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("token"), str) or not spec["token"]:
            raise ApiError(422, "Invalid", "TokenReview.authentication.k8s.io is invalid: spec.token: "
                                           "Required value")
        status = tokens.review(spec["token"], _strings(spec.get("audiences"), "spec.audiences"))
        return json_response({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                              "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}, 201)

    async def token_request(request: web.Request) -> web.Response:
        body = await read_json(request)
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict):
            raise ApiError.bad_request("TokenRequest: spec is required")
        expiration = spec.get("expirationSeconds", 3600)
        if not isinstance(expiration, int) or not MIN_EXPIRATION_S <= expiration <= MAX_EXPIRATION_S:
            raise ApiError(422, "Invalid", f"spec.expirationSeconds: Invalid value: {expiration}: may not "
                                           f"specify a duration less than {MIN_EXPIRATION_S} seconds")
        ref = spec.get("boundObjectRef")
        bound = isinstance(ref, dict) and ref.get("kind") == "Pod"
        pod = (str(ref.get("name")), str(ref.get("uid"))) if bound and isinstance(ref, dict) else None
        audiences = _strings(spec.get("audiences"), "spec.audiences") or [API_AUDIENCE]
        token, exp = tokens.issue(request.match_info["ns"], request.match_info["name"], audiences=audiences,
                                  expiration_s=expiration, pod=pod)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(exp))
        return json_response({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                              "metadata": {"name": request.match_info["name"],
                                           "namespace": request.match_info["ns"]},
                              "spec": spec | {"audiences": audiences, "expirationSeconds": expiration},
                              "status": {"token": token, "expirationTimestamp": stamp}}, 201)

    router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", token_review)
    router.add_post(TOKEN_REQUEST_PATH, token_request)
