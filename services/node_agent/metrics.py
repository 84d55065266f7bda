"""Prometheus metrics of one node-agent, in its own registry (several agents may share a process).

Only names, labels and buckets live here; the shells increment them. Exposed by the app's
aiohttp ``/metrics`` endpoint.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: Allocate handler latencies are sub-millisecond; the buckets resolve that range.
_HANDLER_BUCKETS = (0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0)


class NodeAgentMetrics:
    """Counters and histograms of the device plugin, the handoff and discovery."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.allocations = Counter(
            "gpubus_node_agent_allocations", "Allocate container requests by outcome", ["outcome"], registry=r
        )
        self.mismatches = Counter(
            "gpubus_node_agent_allocation_mismatches",
            "Kubelet assignments that differ from the decision (where: allocate, pod_resources)",
            ["where"],
            registry=r,
        )
        self.verifications = Counter(
            "gpubus_node_agent_verifications",
            "Pod resources checks after Allocate by result (ok, mismatch, unlisted)",
            ["result"],
            registry=r,
        )
        self.allocate_seconds = Histogram(
            "gpubus_node_agent_allocate_handler_seconds",
            "Time in the Allocate handler (decode, match, build, encode)",
            buckets=_HANDLER_BUCKETS,
            registry=r,
        )
        self.bad_requests = Counter(
            "gpubus_node_agent_bad_requests",
            "Malformed outside input refused or ignored, by edge (Allocate, GetPreferredAllocation, "
            "health_query, allocation_event, allocations_kv, healthchecks_setting)",
            ["method"],
            registry=r,
        )
        self.preferred = Counter(
            "gpubus_node_agent_preferred_allocations",
            "GetPreferredAllocation answers by outcome",
            ["outcome"],
            registry=r,
        )
        self.registrations = Counter(
            "gpubus_node_agent_registrations",
            "Registrations with the kubelet by result",
            ["result"],
            registry=r,
        )
        self.decision_resyncs = Counter(
            "gpubus_node_agent_decision_resyncs",
            "Re-creations of the decisions' consumer asked by a kubelet call that waited for its decision",
            registry=r,
        )
        self.health_transitions = Counter(
            "gpubus_node_agent_health_transitions", "Device health changes", ["healthy"], registry=r
        )
        self.devices = Gauge(
            "gpubus_node_agent_devices", "Physical GPUs advertised, by health", ["health"], registry=r
        )
        self.pending = Gauge(
            "gpubus_node_agent_pending_decisions", "Decided pods awaiting Allocate", registry=r
        )
