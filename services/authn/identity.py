"""Who a bearer token speaks for: a Kubernetes TokenReview, then the pod it names and its node.

A node-agent/monitor pod presents its projected service-account token (audience-bound, bound to
the pod). The API server's TokenReview says whether it is valid for our audience and names the
service account and the pod (``authentication.kubernetes.io/pod-name``/``pod-uid``); the pod, read
back, names the node (``spec.nodeName``). Only the service accounts in the settings may speak for
a node. Every refusal has a :class:`Refusal` reason (a metric label) and a message for the log.

The decisions (:func:`pod_claim`, :func:`node_of`) are pure; :func:`identify` does the two reads
through the small :class:`IdentityApi` port.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from shared.kube_errors import KubeError
from shared.kube_types import Pod

EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
SA_PREFIX = "system:serviceaccount:"
#: A bearer token longer than this is not a service-account token (nor sent to the API server).
MAX_TOKEN_CHARS = 16_384


class Refusal(StrEnum):
    """Why a connection was not let in (the ``reason`` label of ``gpubus_authn_refused_total``)."""

    BAD_REQUEST = "bad_request"
    NO_TOKEN = "no_token"
    TOKEN_REJECTED = "token_rejected"
    WRONG_AUDIENCE = "wrong_audience"
    NOT_A_POD_TOKEN = "not_a_pod_token"
    SERVICE_ACCOUNT = "service_account_not_allowed"
    POD_GONE = "pod_gone"
    POD_NOT_ON_NODE = "pod_not_on_node"
    KUBE_UNAVAILABLE = "kube_unavailable"


class Refused(Exception):
    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class IdentityApi(Protocol):
    """The two API server calls a callout needs."""

    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]: ...

    async def get_pod(self, namespace: str, name: str) -> Pod | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PodClaim:
    """What a reviewed token says about its holder."""

    namespace: str
    service_account: str
    pod: str
    pod_uid: str
    node: str | None
    """The node the token names itself (Kubernetes 1.30+), else None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeIdentity:
    node: str
    namespace: str
    pod: str
    service_account: str
    expires: int | None
    """The token's ``exp`` (unix seconds), when it has one: the session ends with it."""


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _single(extra: Mapping[str, Any], key: str) -> str | None:
    values = extra.get(key)
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str) and values[0]:
        return values[0]
    return None


def pod_claim(status: Mapping[str, Any], audience: str, allowed: Collection[str]) -> PodClaim:
    """The pod a TokenReview ``status`` vouches for; :class:`Refused` unless it is one we accept.

    ``allowed`` holds ``namespace:serviceaccount`` names."""
    if status.get("authenticated") is not True:
        raise Refused(Refusal.TOKEN_REJECTED,
                      f"the API server rejected the token: {status.get('error') or '-'}")
    audiences = status.get("audiences")
    if not isinstance(audiences, list) or audience not in audiences:
        raise Refused(Refusal.WRONG_AUDIENCE,
                      f"the token is not for audience {audience!r} (it is for {audiences})")
    user = _object(status.get("user"))
    username = str(user.get("username") or "")
    if not username.startswith(SA_PREFIX) or username.count(":") != 3:
        raise Refused(Refusal.NOT_A_POD_TOKEN, f"{username or 'the token'} is not a service account")
    namespace, service_account = username[len(SA_PREFIX):].split(":")
    if f"{namespace}:{service_account}" not in allowed:
        raise Refused(Refusal.SERVICE_ACCOUNT,
                      f"service account {namespace}:{service_account} may not speak for a node")
    extra = _object(user.get("extra"))
    pod, uid = _single(extra, EXTRA_POD_NAME), _single(extra, EXTRA_POD_UID)
    if pod is None or uid is None:
        raise Refused(Refusal.NOT_A_POD_TOKEN,
                      f"the token of {namespace}:{service_account} is not bound to a pod")
    return PodClaim(namespace=namespace, service_account=service_account, pod=pod, pod_uid=uid,
                    node=_single(extra, EXTRA_NODE_NAME))


def node_of(claim: PodClaim, pod: Pod | None) -> str:
    """The node of the claimed pod, read back from the API server; :class:`Refused` if it is gone."""
    where = f"pod {claim.namespace}/{claim.pod}"
    if pod is None or pod.get("metadata", {}).get("uid") != claim.pod_uid:
        raise Refused(Refusal.POD_GONE, f"{where} (uid {claim.pod_uid}) no longer exists")
    node = pod.get("spec", {}).get("nodeName")
    if not isinstance(node, str) or not node:
        raise Refused(Refusal.POD_NOT_ON_NODE, f"{where} is not on a node")
    if claim.node is not None and claim.node != node:
        raise Refused(Refusal.POD_NOT_ON_NODE, f"{where} is on {node}, its token names {claim.node}")
    return node


def token_expiry(token: str) -> int | None:
    """The ``exp`` of a (reviewed, so trusted) JWT bearer token, or None when it has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return exp if isinstance(exp, int) and not isinstance(exp, bool) else None


async def identify(api: IdentityApi, token: str, *, audience: str, allowed: Collection[str]) -> NodeIdentity:
    """Review ``token`` and read its pod back: the node it speaks for, or :class:`Refused`."""
    if not token:
        raise Refused(Refusal.NO_TOKEN, "the client sent no token")
    if len(token) > MAX_TOKEN_CHARS:
        raise Refused(Refusal.TOKEN_REJECTED,
                      f"a token of {len(token)} characters is not a service-account token")
    try:
        claim = pod_claim(await api.review_token(token, [audience]), audience, allowed)
        node = node_of(claim, await api.get_pod(claim.namespace, claim.pod))
    except KubeError as e:
        raise Refused(Refusal.KUBE_UNAVAILABLE, f"cannot ask the API server: {e}") from None
    return NodeIdentity(node=node, namespace=claim.namespace, pod=claim.pod,
                        service_account=claim.service_account, expires=token_expiry(token))
