"""The callout service's Prometheus metrics (``gpubus_authn_*``); no logic."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from services.authn.identity import Refusal


class AuthnMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.allowed = Counter("gpubus_authn_allowed", "Connections let in as their node.",
                               registry=self.registry)
        self.refused = Counter("gpubus_authn_refused", "Connections refused, by reason.", ["reason"],
                               registry=self.registry)
        self.seconds = Histogram("gpubus_authn_request_seconds", "Time to answer one callout request.",
                                 registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
        for reason in Refusal:
            self.refused.labels(reason.value)
