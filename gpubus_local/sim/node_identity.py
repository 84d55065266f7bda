"""The simulated nodes' side of per-node identity: each node's agent pod and its projected token.

As a DaemonSet and a kubelet would: the pod ``gpubus-system/gpubus-<node>`` (service account
``gpubus-node``, running until deleted) and a TokenRequest bound to it for the audience
``gpubus-nats``, written to a file the node-agent's bus reads (``BusSettings.token_file``).
The keys and the NATS config are ``gpubus_local.stack_identity``'s.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.stack_identity import AUDIENCE, NAMESPACE, SERVICE_ACCOUNT, TOKEN_EXPIRATION_S, private_file
from shared.kube_errors import Conflict


def node_pod(node: str) -> dict[str, object]:
    """The node's agent pod, as a DaemonSet would make it (runs until deleted)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"gpubus-{node}", "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "gpubus-node"},
                         "annotations": {"gpubus.io/sim-duration": "never"}},
            "spec": {"nodeName": node, "serviceAccountName": SERVICE_ACCOUNT,
                     "containers": [{"name": "node-agent", "image": "gpubus"}]}}


#: gpubus's own namespace is never sent to its webhook, as the chart excludes its release namespace:
#: the node pods are made while the webhook may still be starting (it refused them, seen under load).
NAMESPACE_LABELS = {"hami.io/webhook": "ignore"}


async def ensure_namespace(kube: SimKubeClient) -> None:
    """``gpubus-system``, where the node pods live (a Helm install makes it on a cluster)."""
    with contextlib.suppress(Conflict):
        await kube.create_namespace(NAMESPACE, labels=NAMESPACE_LABELS)


async def node_token_file(kube: SimKubeClient, node: str, directory: Path) -> Path:
    """The node pod (made if missing) and its projected token, written to ``directory/<node>.token``."""
    name = f"gpubus-{node}"
    pod = await kube.get_pod(NAMESPACE, name)
    if pod is None:
        try:
            pod = await kube.create_pod(NAMESPACE, node_pod(node))  # type: ignore[arg-type]
        except Conflict:
            pod = await kube.get_pod(NAMESPACE, name)
    assert pod is not None
    token = await kube.request_token(NAMESPACE, SERVICE_ACCOUNT, audiences=[AUDIENCE],
                                     expiration_s=TOKEN_EXPIRATION_S, pod=(name, pod["metadata"]["uid"]))
    return private_file(directory / f"{node}.token", token)
