"""The webhook's Prometheus metrics, in a registry of its own (never the global one)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

#: Admission round trips are expected well under 2 ms; the buckets resolve that range.
LATENCY_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _DroppedEvents(Collector):
    """Events the bus link dropped (outbox full while NATS was away), read when scraped."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "gpubus_webhook_bus_outbox_dropped", "Admission events dropped because NATS was away too long"
        )
        family.add_metric([], float(self._read()))
        yield family


class WebhookMetrics:
    """Counters and the latency histogram the handler, quota cache and TLS reloader update."""

    def __init__(self, dropped_events: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "gpubus_webhook_requests",
            "Admission reviews answered, by result (allowed, denied, errored)",
            ["result"],
            registry=r,
        )
        self.decisions = Counter(
            "gpubus_webhook_decisions",
            "Admission decisions by outcome (Admitted, Privileged, ...)",
            ["outcome"],
            registry=r,
        )
        self.bad_requests = Counter(
            "gpubus_webhook_bad_requests",
            "Request bodies that were not a usable AdmissionReview, by kind",
            ["kind"],
            registry=r,
        )
        self.latency = Histogram(
            "gpubus_webhook_request_duration_seconds",
            "Time from request received to response encoded",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.quota_errors = Counter(
            "gpubus_webhook_quota_read_errors",
            "ResourceQuota reads that failed (admitted without the check)",
            registry=r,
        )
        self.cert_reloads = Counter(
            "gpubus_webhook_cert_reloads",
            "Serving certificate reloads after the files changed, by result",
            ["result"],
            registry=r,
        )
        r.register(_DroppedEvents(dropped_events))
