"""Pod CREATE through the SimApiServer's mutating webhook chain, with a real HTTPS webhook (trustme).

Case matrix: the AdmissionReview the webhook receives (uid, kind, resource, operation, namespace,
empty name with generateName, defaulted spec, no uid yet); a JSONPatch applied (annotation added,
schedulerName replaced); a denial returned as the webhook's status; webhook down or answering
garbage under failurePolicy Fail (create refused, clear message) and Ignore (created unchanged);
a namespace labelled ``hami.io/webhook=ignore`` never sent; a wrong response uid refused; the patched
pod decoded as the real server decodes a webhook's result (unknown fields the patch wrote dropped) and
checked again where the patch wrote (added, replaced, removed, a move's source, the whole document): a
wrong type there is a 400, a pod left unusable a 422.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trustme

from gpubus_local.sim.admission import WebhookConfig
from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from shared.kube import KubeRejected, KubeUnavailable
from shared.kube_types import Pod

if TYPE_CHECKING:
    from webhook_fixtures import Webhook

pytest_plugins = ("webhook_fixtures",)


async def cluster(tmp_path: Path, *webhooks: WebhookConfig) -> tuple[SimApiServer, SimKubeClient]:
    api = SimApiServer(webhooks=list(webhooks))
    await api.start()
    return api, await SimKubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kc"))


def pod() -> Pod:
    return {"metadata": {"generateName": "gpu-"},
            "spec": {"containers": [{"name": "c", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


async def refused_create(tmp_path: Path, webhook: Webhook) -> KubeRejected:
    """Create a pod through ``webhook``, which must refuse it; nothing may be stored."""
    api, kube = await cluster(tmp_path, WebhookConfig(name="vgpu.gpubus.io", url=webhook.url,
                                                      ca_bundle=webhook.ca_pem))
    try:
        with pytest.raises(KubeRejected) as info:
            await kube.create_pod("default", pod())
        assert (await kube.list_pods())[0] == []
    finally:
        await kube.close()
        await api.stop()
    return info.value


async def test_webhook_patch_is_applied_on_create(tmp_path: Path, webhook: Webhook) -> None:
    api, kube = await cluster(tmp_path, WebhookConfig(name="vgpu.gpubus.io", url=webhook.url,
                                                      ca_bundle=webhook.ca_pem))
    try:
        created = await kube.create_pod("default", pod())
    finally:
        await kube.close()
        await api.stop()
    assert created["metadata"]["annotations"] == {"gpubus.io/admitted": "true"}
    assert created["spec"]["schedulerName"] == "gpubus-scheduler"
    assert created["metadata"]["name"].startswith("gpu-") and created["metadata"]["uid"]


async def test_webhook_receives_a_real_admission_review(tmp_path: Path, webhook: Webhook) -> None:
    api, kube = await cluster(tmp_path, WebhookConfig(name="vgpu.gpubus.io", url=webhook.url,
                                                      ca_bundle=webhook.ca_pem))
    try:
        await kube.create_pod("default", pod())
    finally:
        await kube.close()
        await api.stop()
    [review] = webhook.received
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    request = review["request"]
    assert request["uid"] and request["operation"] == "CREATE" and request["namespace"] == "default"
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["name"] == ""  # generateName: the name is chosen after admission
    assert "uid" not in request["object"]["metadata"]
    assert request["object"]["spec"]["schedulerName"] == "default-scheduler"
    assert request["userInfo"]["username"]


async def test_webhook_denial_refuses_the_create_with_its_message(tmp_path: Path, webhook: Webhook) -> None:
    webhook.answer = lambda req: {"uid": req["uid"], "allowed": False,
                                  "status": {"code": 400, "message": "gpumem must be positive"}}
    rejected = await refused_create(tmp_path, webhook)
    assert rejected.code == 400
    assert 'admission webhook "vgpu.gpubus.io" denied the request: gpumem must be positive' in str(rejected)


async def test_webhook_down_with_fail_policy_refuses_the_create(tmp_path: Path) -> None:
    down = WebhookConfig(name="vgpu.gpubus.io", url="https://127.0.0.1:1/mutate", failure_policy="Fail",
                         timeout_s=2)
    api, kube = await cluster(tmp_path, down)
    try:
        with pytest.raises(KubeUnavailable) as info:
            await kube.create_pod("default", pod())
    finally:
        await kube.close()
        await api.stop()
    assert info.value.code == 500
    assert 'failed calling webhook "vgpu.gpubus.io"' in str(info.value)


async def test_webhook_down_with_ignore_policy_creates_unchanged(tmp_path: Path) -> None:
    down = WebhookConfig(name="vgpu.gpubus.io", url="https://127.0.0.1:1/mutate", failure_policy="Ignore",
                         timeout_s=2)
    api, kube = await cluster(tmp_path, down)
    try:
        created = await kube.create_pod("default", pod())
    finally:
        await kube.close()
        await api.stop()
    assert "annotations" not in created["metadata"]


REVIEW = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"'


async def test_unknown_fields_a_webhooks_patch_writes_are_dropped_and_the_rest_kept(
    tmp_path: Path, webhook: Webhook
) -> None:
    from webhook_fixtures import patching  # not at the top: pytest must load its plugin first

    webhook.answer = patching([
        {"op": "add", "path": "/metadata/annotations", "value": {"gpubus.io/admitted": "true"}},
        {"op": "add", "path": "/spec/containers/0/bogus", "value": 1},
        {"op": "add", "path": "/spec/containers/0/resources/bogus", "value": {}},
        {"op": "add", "path": "/spec/initContainers",
         "value": [{"name": "init", "image": "busybox", "extra": True}]},
        {"op": "add", "path": "/spec/unknownSpecField", "value": "x"},
        {"op": "move", "from": "/spec/schedulerName", "path": "/schedulerHint"},
        {"op": "add", "path": "/spec/schedulerName", "value": "gpubus-scheduler"},
    ])
    api, kube = await cluster(tmp_path, WebhookConfig(name="vgpu.gpubus.io", url=webhook.url,
                                                      ca_bundle=webhook.ca_pem))
    try:
        created: Any = await kube.create_pod("default", pod())
        [stored] = (await kube.list_pods())[0]
    finally:
        await kube.close()
        await api.stop()
    assert stored == created
    assert created["metadata"]["annotations"] == {"gpubus.io/admitted": "true"}
    container = created["spec"]["containers"][0]
    assert "bogus" not in container and container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert created["spec"]["initContainers"] == [{"name": "init", "image": "busybox"}]
    assert "unknownSpecField" not in created["spec"] and "schedulerHint" not in created
    assert created["spec"]["schedulerName"] == "gpubus-scheduler"


@pytest.mark.parametrize(("ops", "code", "message"), [
    ([{"op": "replace", "path": "/spec/containers/0/resources/limits", "value": ["nvidia.com/gpu"]}],
     400, "cannot unmarshal array into Go struct field Pod.spec.containers[0].resources.limits"),
    ([{"op": "add", "path": "/metadata/labels", "value": {"team": 1}}],
     400, "cannot unmarshal number into Go struct field Pod.metadata.labels[team]"),
    ([{"op": "remove", "path": "/spec/containers/0/image"}], 422, "name and image are required"),
    ([{"op": "move", "from": "/spec/containers", "path": "/metadata/containers"}],
     422, "spec.containers: Required value"),
    ([{"op": "replace", "path": "",
       "value": {"metadata": {"generateName": "gpu-"}, "spec": {"containers": 1}}}],
     400, "cannot unmarshal number into Go struct field Pod.spec.containers"),
], ids=["wrong-type-written", "wrong-label", "removed", "moved-away", "whole-document"])
async def test_a_pod_a_webhooks_patch_leaves_malformed_is_refused_and_not_stored(
    tmp_path: Path, webhook: Webhook, ops: list[dict[str, Any]], code: int, message: str
) -> None:
    from webhook_fixtures import patching  # not at the top: pytest must load its plugin first

    webhook.answer = patching(ops)
    rejected = await refused_create(tmp_path, webhook)
    assert rejected.code == code
    assert message in str(rejected)


@pytest.mark.parametrize("reply", [b"not json",
                                   REVIEW + b',"response":{"uid":"someone-else","allowed":true}}',
                                   REVIEW + b"}"],
                         ids=["garbage", "wrong-uid", "no-response"])
async def test_malformed_webhook_reply_is_a_call_failure(
    tmp_path: Path, webhook: Webhook, reply: bytes
) -> None:
    webhook.raw_reply = reply
    api, kube = await cluster(tmp_path, WebhookConfig(name="vgpu.gpubus.io", url=webhook.url,
                                                      ca_bundle=webhook.ca_pem))
    try:
        with pytest.raises(KubeUnavailable, match="failed calling webhook"):
            await kube.create_pod("default", pod())
    finally:
        await kube.close()
        await api.stop()


async def test_untrusted_webhook_certificate_fails_the_call(tmp_path: Path, webhook: Webhook) -> None:
    other_ca = trustme.CA().cert_pem.bytes()
    untrusting = WebhookConfig(name="vgpu.gpubus.io", url=webhook.url, ca_bundle=other_ca)
    api, kube = await cluster(tmp_path, untrusting)
    try:
        with pytest.raises(KubeUnavailable, match="failed calling webhook"):
            await kube.create_pod("default", pod())
    finally:
        await kube.close()
        await api.stop()
    assert webhook.received == []


async def test_namespace_labelled_ignore_is_not_sent_to_the_webhook(tmp_path: Path, webhook: Webhook) -> None:
    api, kube = await cluster(tmp_path, WebhookConfig(name="vgpu.gpubus.io", url=webhook.url,
                                                      ca_bundle=webhook.ca_pem))
    try:
        await kube.create_namespace("system", labels={"hami.io/webhook": "ignore"})
        created = await kube.create_pod("system", pod())
    finally:
        await kube.close()
        await api.stop()
    assert webhook.received == [] and "annotations" not in created["metadata"]


def test_webhook_config_reads_a_mutating_webhook_configuration_entry() -> None:
    entry = {"name": "vgpu.hami.io", "clientConfig": {"url": "https://h:443/m",
                                                      "caBundle": base64.b64encode(b"PEM").decode()},
             "failurePolicy": "Ignore", "timeoutSeconds": 3,
             "namespaceSelector": {"matchLabels": {"gpu": "yes"}}}
    config = WebhookConfig.from_k8s(entry)
    assert (config.url, config.ca_bundle, config.failure_policy, config.timeout_s) == (
        "https://h:443/m", b"PEM", "Ignore", 3.0)
    assert config.namespace_selector == {"matchLabels": {"gpu": "yes"}}
