"""Who may open the dashboard: a Kubernetes bearer token, checked as kube-apiserver checks one.

With ``auth = "kubernetes"`` every page and API call must carry ``Authorization: Bearer <token>``
(an ingress's authenticating proxy or ``kubectl proxy``-style front adds it): the token is
reviewed (TokenReview) and its user must be allowed ``get`` on ``dashboards`` of the API group
``gpubus.io`` in the release namespace (SubjectAccessReview), so access is granted with ordinary
RBAC (the chart's ``gpubus-dashboard-viewer`` ClusterRole). Verdicts are cached for
``cache_s`` by the token's hash (never the token), bounded. ``/healthz``, ``/readyz`` and
``/metrics`` stay open (probes; the NetworkPolicy narrows ``/metrics``). Must not know pages.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from shared.errors import GpubusError

log = logging.getLogger(__name__)

#: Paths served without a token (kubelet probes, Prometheus behind the NetworkPolicy).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: Verdicts kept (oldest dropped first).
CACHE_SIZE = 1024


class Verdict(enum.StrEnum):
    ALLOWED = "allowed"
    NO_TOKEN = "no_token"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"


class Reviewer(Protocol):
    """The two API server reviews (:class:`shared.kube.KubeClient`)."""

    async def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]: ...

    async def review_access(self, user: dict[str, Any], attributes: dict[str, str]) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessRule:
    namespace: str
    """Namespace of the ``dashboards`` resource the user must be allowed to ``get``."""
    group: str = "gpubus.io"
    resource: str = "dashboards"
    verb: str = "get"
    audiences: tuple[str, ...] = ()
    """Audiences the token must carry (empty: the API server's own)."""


class TokenGate:
    """``await gate.verdict(header)``: what the request's ``Authorization`` header is worth."""

    def __init__(self, reviewer: Reviewer, rule: AccessRule, *, cache_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reviewer, self._rule, self._cache_s, self._clock = reviewer, rule, cache_s, clock
        self._cache: OrderedDict[str, tuple[Verdict, float]] = OrderedDict()
        self.counts: dict[Verdict, int] = dict.fromkeys(Verdict, 0)
        self.on_verdict: Callable[[Verdict], None] = lambda verdict: None
        """Counts each verdict (the dashboard's ``gpubus_dashboard_access`` metric)."""

    async def verdict(self, header: str | None) -> Verdict:
        verdict = await self._judge(header)
        self.counts[verdict] += 1
        self.on_verdict(verdict)
        return verdict

    async def _judge(self, header: str | None) -> Verdict:
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Verdict.NO_TOKEN
        key = hashlib.sha256(token.strip().encode()).hexdigest()
        now = self._clock()
        held = self._cache.get(key)
        if held is not None and held[1] > now:
            return held[0]
        try:
            verdict = await self._review(token.strip())
        except GpubusError as e:
            log.warning("cannot review a dashboard token: %s", e)
            return Verdict.UNAVAILABLE  # not cached: the next request asks again
        self._cache[key] = (verdict, now + self._cache_s)
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return verdict

    async def _review(self, token: str) -> Verdict:
        status = await self._reviewer.review_token(token, list(self._rule.audiences))
        if not status.get("authenticated"):
            return Verdict.UNAUTHENTICATED
        user = status.get("user") or {}
        rule = self._rule
        allowed = await self._reviewer.review_access(user, {
            "namespace": rule.namespace, "group": rule.group, "resource": rule.resource, "verb": rule.verb})
        return Verdict.ALLOWED if allowed else Verdict.FORBIDDEN


_ANSWERS: dict[Verdict, tuple[int, str]] = {
    Verdict.NO_TOKEN: (401, "a Kubernetes bearer token is required (Authorization: Bearer ...)"),
    Verdict.UNAUTHENTICATED: (401, "the token is not valid"),
    Verdict.FORBIDDEN: (403, "this user may not get dashboards.gpubus.io in this namespace"),
    Verdict.UNAVAILABLE: (503, "the Kubernetes API cannot review the token now; try again"),
}


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def token_middleware(gate: TokenGate) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The aiohttp middleware that answers 401/403/503 before any page is built."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        verdict = await gate.verdict(request.headers.get("Authorization"))
        if verdict is Verdict.ALLOWED:
            return await handler(request)
        status, text = _ANSWERS[verdict]
        headers = {"WWW-Authenticate": 'Bearer realm="gpubus"'} if status == 401 else None
        return web.Response(status=status, text=text + "\n", headers=headers)

    return middleware
