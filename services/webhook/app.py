"""Composition root of ``gpubus webhook``: builds the settings' parts, the bus link, the quota cache,
the TLS reloader and the aiohttp server, runs them, and tears them down in reverse order.

Nothing else in the webhook constructs long-lived resources.
"""

from __future__ import annotations

import gc
import logging
from contextlib import AsyncExitStack

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
from shared.component import Component
from shared.kube import KubeClient
from shared.kube_config import kube_client
from shared.lifetime import Lifetime
from shared.quota_cache import READ_FAILED, QuotaCache
from shared.service import bound_port

log = logging.getLogger(__name__)


class Webhook(Component):
    """The webhook: ``async with Webhook(settings, bus_settings) as w:`` serves on :attr:`port`."""

    def __init__(self, settings: WebhookSettings, bus_settings: BusSettings) -> None:
        super().__init__()
        self.admission = settings.admission()  # an invalid policy fails here, before anything is opened
        self.settings = settings
        self.bus = BusLink(bus_settings, source=settings.source)
        self.metrics = WebhookMetrics(dropped_events=lambda: self.bus.dropped)
        self.metrics.registry.register(BusStatsCollector(lambda: self.bus.stats))
        self.tls = _tls(settings, self.metrics)
        self.kube: KubeClient | None = None
        self.quotas: QuotaCache[QuotaView] | None = None
        self.port = 0

    async def _open(self, exits: AsyncExitStack) -> None:
        """Kubernetes, the quota cache, then the server; the bus link connects in the background.

        Closed in reverse: the server first (in-flight admissions still emit), then the bus link."""
        self.kube = await kube_client(self.settings)
        if self.kube is not None:
            exits.push_async_callback(self.kube.close)
        self.quotas = _quotas(self.kube, self.settings, self.metrics)
        if self.quotas is not None:
            exits.push_async_callback(self.quotas.close)
        exits.push_async_callback(self.bus.close)
        deps = Deps(
            settings=self.admission,
            quotas=self.quotas,
            events=self.bus,
            metrics=self.metrics,
            max_body_bytes=self.settings.max_body_bytes,
            source=self.settings.source,
            bus_state=lambda: self.bus.state,
            templates=(TemplateWriter(self.kube, ttl_s=self.settings.template_cache_ttl_s)
                       if self.admission.claims else None),
        )
        runner = build_runner(deps)
        await runner.setup()
        exits.push_async_callback(runner.cleanup)
        tls = self.tls
        await web.TCPSite(runner, self.settings.bind, self.settings.port,
                          ssl_context=tls.context if tls else None).start()
        self.port = bound_port(runner)
        self.bus.start()
        log.info("webhook serving %s on %s:%d", "HTTPS" if tls else "plain HTTP", self.settings.bind,
                 self.port)


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
    async with Webhook(settings, bus_settings):
        # Everything built so far lives as long as the process: keep the cyclic GC from rescanning it
        # on every collection, which otherwise shows up as admission tail latency.
        gc.freeze()
        try:
            await lifetime.wait()
        finally:
            log.info("webhook shutting down")
