"""The webhook in the loop with the API server stand-in: pods created through the real SimKubeClient go
through the stand-in's mutating webhook chain to our real HTTPS webhook, and the webhook reads
ResourceQuotas back from the same API server through the real SimKubeClient.

Cases: a bare ``gpu: 1`` pod is stored exclusive and routed to gpubus-scheduler; a multi-card pod
over the namespace's GPU memory quota is refused with HAMi's message while a smaller one passes;
a privileged GPU pod is refused; a pod without GPU is stored as sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import trustme
from natsproc import free_port

from gpubus_local.sim.admission import WebhookConfig
from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from services.webhook.app import Webhook
from services.webhook.settings import WebhookSettings
from shared.bus import BusSettings
from shared.kube import KubeRejected
from shared.kube_types import Pod, ResourceQuota


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[SimApiServer, SimKubeClient]]:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    async with SimApiServer() as api, contextlib.AsyncExitStack() as stack:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        settings = WebhookSettings(
            bind="127.0.0.1",
            port=0,
            cert=str(cert),
            key=str(key),
            kubeconfig=str(kubeconfig),
            quota_cache_ttl_s=0.0,
        )
        webhook = await stack.enter_async_context(
            Webhook(settings, BusSettings(url=f"nats://127.0.0.1:{free_port()}")))
        api.admission.add(
            WebhookConfig(
                name="vgpu.gpubus.io",
                url=f"https://127.0.0.1:{webhook.port}/webhook",
                ca_bundle=ca.cert_pem.bytes(),
            )
        )
        kube = await SimKubeClient.from_kubeconfig(kubeconfig)
        stack.push_async_callback(kube.close)
        yield api, kube


def gpu_pod(name: str, **limits: Any) -> Pod:
    pod: Any = {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]},
    }
    return cast(Pod, pod)


async def test_bare_gpu_pod_is_stored_exclusive_and_routed_to_gpubus(
    cluster: tuple[SimApiServer, SimKubeClient],
) -> None:
    _, kube = cluster
    created = await kube.create_pod("default", gpu_pod("train", **{"nvidia.com/gpu": "1"}))
    assert created["spec"]["schedulerName"] == "gpubus-scheduler"
    assert created["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpucores": "100",
    }


async def test_multi_card_pod_over_the_memory_quota_is_refused(
    cluster: tuple[SimApiServer, SimKubeClient],
) -> None:
    _, kube = cluster
    quota: ResourceQuota = {
        "metadata": {"name": "gpu"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}},
    }
    await kube.create_resource_quota("default", quota)
    with pytest.raises(KubeRejected, match="exceeding resource quota"):
        await kube.create_pod(
            "default", gpu_pod("big", **{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000"})
        )
    created = await kube.create_pod(
        "default", gpu_pod("small", **{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"})
    )
    assert created["metadata"]["name"] == "small"


async def test_privileged_gpu_pod_is_refused(cluster: tuple[SimApiServer, SimKubeClient]) -> None:
    _, kube = cluster
    pod: Any = gpu_pod("priv", **{"nvidia.com/gpu": "1"})
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(KubeRejected, match="container main is privileged"):
        await kube.create_pod("default", pod)


async def test_pod_without_gpu_is_stored_as_sent(cluster: tuple[SimApiServer, SimKubeClient]) -> None:
    _, kube = cluster
    created = await kube.create_pod("default", gpu_pod("web", cpu="1"))
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert created["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1"}


async def test_a_pod_of_the_wrong_shape_is_refused_before_the_webhook_sees_it(
    cluster: tuple[SimApiServer, SimKubeClient],
) -> None:
    # as the real server's decoder does: a 400, not the webhook's denial or "failed calling webhook"
    _, kube = cluster
    pod: Any = gpu_pod("shapeless", **{"nvidia.com/gpu": "1"})
    pod["spec"]["containers"][0]["resources"]["limits"] = ["nvidia.com/gpu"]
    with pytest.raises(KubeRejected, match="cannot unmarshal array") as refused:
        await kube.create_pod("default", pod)
    assert refused.value.code == 400
