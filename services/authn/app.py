"""``gpubus authn``'s composition root: NATS's auth callout served on ``$SYS.REQ.USER.AUTH``.

Connects as the callout's own user (``auth_users`` in the server config, in the callout account),
answers each authorization request with a user JWT scoped to the node the client's
service-account token belongs to (:mod:`identity`, :mod:`permissions`, :mod:`callout`), and serves
``/healthz``, ``/readyz`` (NATS link up) and ``/metrics``. Several replicas share the requests
(one queue group). Every refusal is logged with its reason and counted.
"""

from __future__ import annotations

import logging
import time
from contextlib import AsyncExitStack
from pathlib import Path

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from services.authn import callout, nkeyjwt
from services.authn.identity import IdentityApi, Refusal, Refused, identify
from services.authn.metrics import AuthnMetrics
from services.authn.permissions import node_permissions
from services.authn.settings import AuthnSettings
from shared.bus import Bus, BusSettings
from shared.component import Component
from shared.errors import BusRefused
from shared.kube import KubeClient
from shared.kube_config import kube_client
from shared.lifetime import Lifetime
from shared.service import bound_port

log = logging.getLogger(__name__)

#: Where nats-server sends authorization requests (ADR-26).
CALLOUT_SUBJECT = "$SYS.REQ.USER.AUTH"
QUEUE = "gpubus-authn"


def load_issuer(path: str) -> nkeyjwt.Signer:
    """The issuer account's signer from its seed file; BusRefused (a settings fault) if unusable."""
    try:
        signer = nkeyjwt.Signer.from_seed(Path(path).read_bytes())
    except (OSError, nkeyjwt.JwtError) as e:
        raise BusRefused(f"authn setting issuer_seed_file: {path}: {e}") from None
    if not signer.public_key.startswith(nkeyjwt.PREFIX_ACCOUNT):
        raise BusRefused(f"authn setting issuer_seed_file: {path} is not an account seed (SA...)")
    return signer


class Authn:
    """Answers callout requests; :meth:`answer` is the whole protocol, the rest is plumbing."""

    def __init__(self, settings: AuthnSettings, issuer: nkeyjwt.Signer, api: IdentityApi,
                 metrics: AuthnMetrics | None = None) -> None:
        self.settings = settings
        self.issuer = issuer
        self.api = api
        self.metrics = metrics or AuthnMetrics()

    async def answer(self, payload: bytes) -> bytes:
        started = time.perf_counter()
        try:
            return await self._answer(payload, int(time.time()))
        finally:
            self.metrics.seconds.observe(time.perf_counter() - started)

    async def _answer(self, payload: bytes, now: int) -> bytes:
        try:
            request = callout.parse_request(payload, now=now)
        except callout.BadRequest as e:
            self._refused(Refusal.BAD_REQUEST, "a callout request", str(e))
            return b""  # nats-server reads an empty reply as a refusal
        try:
            who = await identify(self.api, request.token, audience=self.settings.audience,
                                 allowed=self.settings.service_accounts)
        except Refused as e:
            self._refused(e.reason, request.client, str(e))
            return callout.response(request, self.issuer, now=now, error=f"gpubus authn: {e.reason.value}")
        expires = session_end(now, self.settings.max_session_s, who.expires)
        self.metrics.allowed.inc()
        until = "disconnect" if expires is None else time.strftime("%H:%M:%SZ", time.gmtime(expires))
        log.info("let in %s as node %s (pod %s/%s, service account %s) until %s", request.client, who.node,
                 who.namespace, who.pod, who.service_account, until)
        return callout.allow(request, self.issuer, node_permissions(who.node), name=f"node:{who.node}",
                             account=self.settings.account, expires=expires, now=now)

    def _refused(self, reason: Refusal, who: str, message: str) -> None:
        self.metrics.refused.labels(reason.value).inc()
        log.warning("refused %s (%s): %s", who, reason.value, message)


def session_end(now: int, max_session_s: int, token_expires: int | None) -> int | None:
    """The user JWT's ``exp``: none unless ``max_session_s`` is set, then no later than the token's."""
    if max_session_s <= 0:
        return None
    return min(now + max_session_s, token_expires or now + max_session_s)


class AuthnApp(Component):
    """The callout on the bus plus its HTTP endpoints: ``async with AuthnApp(authn, bus) as app:``.

    The bus is the caller's (it connects as the callout's own NATS user); the app serves on it."""

    def __init__(self, authn: Authn, bus: Bus) -> None:
        super().__init__()
        self.authn = authn
        self.bus = bus
        self.port = 0

    async def _open(self, exits: AsyncExitStack) -> None:
        service = await self.bus.serve(CALLOUT_SUBJECT, self.authn.answer, queue=QUEUE)
        exits.push_async_callback(service.stop)
        app = web.Application()
        app.router.add_get("/healthz", _ok)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", make_aiohttp_handler(self.authn.metrics.registry))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        exits.push_async_callback(runner.cleanup)
        await web.TCPSite(runner, self.authn.settings.bind, self.authn.settings.port).start()
        self.port = bound_port(runner, self.authn.settings.port)
        log.info("auth callout serving %s; /metrics on port %d", CALLOUT_SUBJECT, self.port)

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.bus.is_connected:
            return web.Response(text="ok\n")
        return web.Response(status=503, text="NATS link down\n")


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def run(settings: AuthnSettings, bus_settings: BusSettings, lifetime: Lifetime) -> None:
    """Serve until the lifetime ends (SIGTERM or SIGINT)."""
    issuer = load_issuer(settings.issuer_seed_file)
    # the shared rule (kubeconfig, else in-cluster); with neither the pod's own service account,
    # since TokenReview is the callout's whole job
    async with AsyncExitStack() as exits:
        kube = await kube_client(settings) or await KubeClient.in_cluster()
        exits.push_async_callback(kube.close)
        bus = await Bus.connect(bus_settings, source="authn")
        exits.push_async_callback(bus.close)
        await exits.enter_async_context(AuthnApp(Authn(settings, issuer, kube), bus))
        await lifetime.wait()
