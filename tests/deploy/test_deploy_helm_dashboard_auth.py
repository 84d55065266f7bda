"""The chart's dashboard with ``dashboard.auth=kubernetes``: the pages need a bearer token the API
server reviews (services/dashboard/access.py). Case matrix: by default no token is mounted and no
binding exists (the dashboard reads NATS only); with kubernetes auth the container is told so, its
account's token is mounted and may only review tokens (system:auth-delegator), and a viewer
ClusterRole grants exactly ``get`` on ``dashboards.gpubus.io``; the objects validate strictly.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
from helmchart import NAMESPACE, documents, find

KUBE_AUTH = {"dashboard": {"auth": "kubernetes"}}


def _dashboard(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    deployment = find(docs, "Deployment", "gpubus-dashboard")
    pod = deployment["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "dashboard")["args"]


def test_by_default_the_dashboard_holds_no_token_and_no_binding() -> None:
    docs = documents({})
    pod, args = _dashboard(docs)
    assert pod["automountServiceAccountToken"] is False
    assert not any(a.startswith("--auth") for a in args)
    assert not [d for d in docs if d["kind"] in ("ClusterRoleBinding", "ClusterRole")
                and "dashboard" in d["metadata"]["name"]]


def test_kubernetes_auth_reviews_tokens_and_nothing_else() -> None:
    docs = documents(KUBE_AUTH)
    pod, args = _dashboard(docs)
    assert pod["automountServiceAccountToken"] is True
    assert {"--auth=kubernetes", f"--auth-namespace={NAMESPACE}", "--in-cluster"} <= set(args)
    binding = find(docs, "ClusterRoleBinding", "gpubus-dashboard-auth-delegator")
    assert binding["roleRef"]["name"] == "system:auth-delegator"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    viewer = find(docs, "ClusterRole", "gpubus-dashboard-viewer")
    assert viewer["rules"] == [{"apiGroups": ["gpubus.io"], "resources": ["dashboards"], "verbs": ["get"]}]
    for doc in (binding, viewer, find(docs, "Deployment", "gpubus-dashboard")):
        kubernetes_validate.validate(doc, "1.33", strict=True)
