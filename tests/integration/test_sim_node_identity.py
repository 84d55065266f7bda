"""The simulated nodes' agent pods never go through gpubus's own webhook: ``gpubus up`` makes them
while the webhook may still be starting, as a DaemonSet's pods are made on a cluster whose chart
leaves its release namespace out of the webhook (``namespaceSelector``)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpubus_local.sim.admission import WebhookConfig
from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from gpubus_local.sim.node_identity import ensure_namespace, node_token_file
from gpubus_local.stack_identity import NAMESPACE
from shared.kube_errors import KubeError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[SimKubeClient]:
    """An API server whose only webhook refuses every connection (failurePolicy Fail)."""
    webhook = WebhookConfig(name="vgpu.hami.io", url=f"https://127.0.0.1:{_closed_port()}/mutate")
    async with SimApiServer(webhooks=[webhook]) as api:
        client = await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        yield client
        await client.close()


async def test_a_node_pod_is_made_while_the_webhook_is_down(kube: SimKubeClient, tmp_path: Path) -> None:
    with pytest.raises(KubeError):  # the webhook is really down: an ordinary pod is refused
        await kube.create_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                          "spec": {"containers": [{"name": "c", "image": "x"}]}})
    await ensure_namespace(kube)
    token = node_token_file(kube, "node-1", tmp_path)
    assert (await token).read_text()
    pod = await kube.get_pod(NAMESPACE, "gpubus-node-1")
    assert pod is not None and pod["spec"]["nodeName"] == "node-1"
