"""Composition root of ``gpubus webhook``: builds the settings' parts, the bus link, the quota cache,
the TLS reloader and the aiohttp server, runs them, and tears them down in reverse order.

Nothing else in the webhook constructs long-lived resources.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass, field

from aiohttp import web

from services.webhook.buslink import BusLink
from services.webhook.metrics import WebhookMetrics
from services.webhook.quota import QuotaView
from services.webhook.server import Deps, build_runner
from services.webhook.settings import WebhookSettings
from services.webhook.templates import TemplateWriter
from services.webhook.tls import CertReloader
from shared.bus import BusSettings
from shared.bus.metrics import BusStatsCollector
from shared.kube import KubeClient
from shared.kube_config import kube_client
from shared.lifetime import Lifetime
from shared.quota_cache import READ_FAILED, QuotaCache
from shared.service import bound_port

log = logging.getLogger(__name__)


@dataclass(slots=True, kw_only=True)
class Webhook:
    """A running webhook; :meth:`start` it, read :attr:`port`, :meth:`close` it."""

    settings: WebhookSettings
    bus: BusLink
    metrics: WebhookMetrics
    runner: web.AppRunner
    kube: KubeClient | None = None
    quotas: QuotaCache[QuotaView] | None = None
    tls: CertReloader | None = None
    port: int = 0
    _closed: bool = field(default=False)

    @classmethod
    async def start(cls, settings: WebhookSettings, bus_settings: BusSettings) -> Webhook:
        admission = settings.admission()  # an invalid policy fails here, before anything is opened
        bus = BusLink(bus_settings, source=settings.source)
        metrics = WebhookMetrics(dropped_events=lambda: bus.dropped)
        metrics.registry.register(BusStatsCollector(lambda: bus.stats))
        tls = _tls(settings, metrics)
        kube = await kube_client(settings)
        quotas = _quotas(kube, settings, metrics)
        deps = Deps(
            settings=admission,
            quotas=quotas,
            events=bus,
            metrics=metrics,
            max_body_bytes=settings.max_body_bytes,
            source=settings.source,
            bus_state=lambda: bus.state,
            templates=TemplateWriter(kube, ttl_s=settings.template_cache_ttl_s) if admission.claims else None,
        )
        runner = build_runner(deps)
        await runner.setup()
        webhook = cls(
            settings=settings, bus=bus, metrics=metrics, runner=runner, kube=kube, quotas=quotas, tls=tls
        )
        try:
            site = web.TCPSite(runner, settings.bind, settings.port, ssl_context=tls.context if tls else None)
            await site.start()
        except BaseException:
            await webhook.close()
            raise
        webhook.port = bound_port(runner)
        bus.start()
        log.info("webhook serving %s on %s:%d", "HTTPS" if tls else "plain HTTP", settings.bind, webhook.port)
        return webhook

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.runner.cleanup()
        await self.bus.close()
        if self.quotas is not None:
            await self.quotas.close()
        if self.kube is not None:
            await self.kube.close()


def _tls(settings: WebhookSettings, metrics: WebhookMetrics) -> CertReloader | None:
    if not settings.cert:
        log.warning("no --cert given: serving plain HTTP (the API server only calls webhooks over HTTPS)")
        return None
    return CertReloader(
        settings.cert,
        settings.key or settings.cert,
        min_interval_s=settings.cert_check_interval_s,
        on_reload=lambda ok: metrics.cert_reloads.labels("ok" if ok else "failed").inc(),
        client_ca=settings.client_ca or None,
    )


def _quotas(
    kube: KubeClient | None, settings: WebhookSettings, metrics: WebhookMetrics
) -> QuotaCache[QuotaView] | None:
    if kube is None:
        log.info("no Kubernetes API configured: ResourceQuotas are not checked at admission")
        return None

    def count(kind: str) -> None:
        if kind == READ_FAILED:  # the webhook's counter is of reads; a bad limit is the scheduler's
            metrics.quota_errors.inc()

    return QuotaCache(
        kube, settings.names(), QuotaView.from_parsed, ttl_s=settings.quota_cache_ttl_s, on_error=count
    )


async def run(settings: WebhookSettings, bus_settings: BusSettings, lifetime: Lifetime) -> None:
    """Serve until the lifetime ends (SIGTERM or SIGINT), then shut down cleanly."""
    webhook = await Webhook.start(settings, bus_settings)
    # Everything built so far lives as long as the process: keep the cyclic GC from rescanning it on
    # every collection, which otherwise shows up as admission tail latency.
    gc.freeze()
    try:
        await lifetime.wait()
    finally:
        log.info("webhook shutting down")
        await webhook.close()
