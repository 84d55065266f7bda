"""The chart's NetworkPolicies open each port only to who needs it (docs/security.md).

Case matrix (rendered offline, as tests/deploy/helmchart.py does): by default no peer reaches the
scheduler's extender port (kube-scheduler calls it over loopback in the same pod), the dashboard
or authn; the webhook port is open (the API server calls from outside the pod network) and no
other port of the webhook pod; NATS takes clients only from this release's pods and routes only
from NATS pods. With metricsFrom / apiServer / dashboardFrom / natsClientsFrom set, exactly
those peers are added, on exactly those ports. Every Deployment of the chart is selected by a
policy; the policies validate against the Kubernetes schema.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from helmchart import VALUE_SETS, chart_values, documents

MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
INGRESS_NS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
TAP = {"podSelector": {"matchLabels": {"gpubus.io/nats-client": "true"}}}
OPEN = {"networkPolicy": {"metricsFrom": [MONITORING], "apiServer": ["10.0.0.0/24"],
                          "dashboardFrom": [INGRESS_NS], "natsClientsFrom": [TAP]}}


def _policies(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents(values) if d["kind"] == "NetworkPolicy"}


def _rules(policy: dict[str, Any]) -> list[tuple[tuple[int, ...], list[Any] | None]]:
    """(ports, from) of each ingress rule; from None means any source."""
    return [(tuple(p["port"] for p in rule.get("ports", [])), rule.get("from"))
            for rule in policy["spec"].get("ingress") or []]


def test_by_default_the_extender_dashboard_and_authn_take_nothing_from_the_network() -> None:
    policies = _policies({})
    for name in ("gpubus-scheduler", "gpubus-dashboard", "gpubus-authn"):
        assert policies[name]["spec"]["policyTypes"] == ["Ingress"]
        assert _rules(policies[name]) == [], name


def test_the_webhook_opens_its_port_and_nothing_else() -> None:
    port = chart_values()["webhook"]["port"]
    assert _rules(_policies({})["gpubus-webhook"]) == [((port,), None)]
    assert _rules(_policies(OPEN)["gpubus-webhook"]) == [((port,), [{"ipBlock": {"cidr": "10.0.0.0/24"}}])]


def test_nats_takes_clients_from_this_release_and_routes_from_itself() -> None:
    rules = _rules(_policies({})["gpubus-nats"])
    release = {"app.kubernetes.io/instance": "gpubus"}
    ours = {"podSelector": {"matchLabels": {**release, "app.kubernetes.io/part-of": "gpubus"}}}
    servers = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "nats", **release}}}
    assert rules == [((4222,), [ours]), ((6222,), [servers])]


def test_the_named_peers_are_added_on_their_ports_only() -> None:
    values = chart_values()
    policies = _policies(OPEN)
    assert _rules(policies["gpubus-scheduler"]) == [((values["scheduler"]["port"],), [MONITORING])]
    dashboard = values["dashboard"]["port"]
    assert _rules(policies["gpubus-dashboard"]) == [((dashboard,), [INGRESS_NS, MONITORING])]
    assert _rules(policies["gpubus-authn"]) == [((values["nodeIdentity"]["port"],), [MONITORING])]
    nats = _rules(policies["gpubus-nats"])
    assert nats[0][0] == (4222,) and nats[0][1] is not None and nats[0][1][-1] == TAP
    assert nats[2] == ((8222,), [MONITORING])


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_deployment_is_selected_by_a_policy(value_set: str) -> None:
    docs = documents(VALUE_SETS[value_set])
    selectors = [d["spec"]["podSelector"]["matchLabels"] for d in docs if d["kind"] == "NetworkPolicy"]
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        selected = any(all(labels.get(k) == v for k, v in s.items()) for s in selectors)
        assert selected, deployment["metadata"]["name"]


def test_the_policies_validate_and_can_be_turned_off() -> None:
    for policy in _policies(OPEN).values():
        kubernetes_validate.validate(policy, "1.33", strict=True)
    assert _policies({"networkPolicy": {"enabled": False}}) == {}
