"""``--dry-run=server`` with the real kubectl against the SimApiServer: every stage runs, nothing is stored.

Case matrix:
- ``apply`` of a new pod: ``pod/x created (server dry run)``; a GET is 404, the resourceVersion has
  not moved, and a watch opened before it gets, as its next event, the real pod created after it;
- ``create -o json`` with generateName: the answer is the pod as it would be stored (defaults, a made
  name, uid, creationTimestamp, phase Pending) without a resourceVersion; nothing is stored;
- ``patch -o json`` of labels: the answer has the patched labels at the stored resourceVersion; the
  stored pod keeps its labels; ``apply`` of a changed pod and ``replace``: printed as dry runs, the
  stored pod unchanged;
- ``delete``: ``pod "x" deleted (server dry run)`` and the pod is still there;
- refused as the real write would be: a change of an immutable field (422, the real Forbidden
  message), a name already taken (409);
- a value other than ``All`` (kubectl cannot send one; plain HTTP): the real 422 on a create and on a
  delete's query; a delete with a DeleteOptions body reads the body, not the query;
- webhooks: a dry-run create calls the webhook with ``dryRun: true`` (its patch is in the answer,
  nothing is stored); a webhook with ``sideEffects: Some`` refuses the dry run with the real 400,
  whatever its failure policy, without being called, and is still called for the real create.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import sim_fixtures
from kubectl import kubectl, needs_kubectl
from pod_manifests import FORBIDDEN, pod_yaml

from gpubus_local.sim.admission import WebhookConfig
from gpubus_local.sim.apiserver import SimApiServer
from gpubus_local.sim.kube import SimKubeClient
from shared.kube_types import WatchEvent

if TYPE_CHECKING:
    from webhook_fixtures import Webhook

pytestmark = needs_kubectl
pytest_plugins = ("webhook_fixtures",)


# this module's SimApiServer, its kubeconfig and a SimKubeClient on it (bound by name: see sim_fixtures)
server = sim_fixtures.server
config = sim_fixtures.config
kube = sim_fixtures.kube


@pytest.fixture
async def stored(config: Path, server: SimApiServer) -> dict[str, Any]:
    """Pod ``x`` (label a=1, busybox:1), really applied."""
    code, out, err = await kubectl(config, "apply", "-f", "-", stdin=pod_yaml())
    assert (code, out) == (0, "pod/x created\n"), err
    return server.store.get("pods", "default", "x")


async def dry(config: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    return await kubectl(config, *args, "--dry-run=server", stdin=stdin)


async def next_change(stream: AsyncIterator[WatchEvent]) -> WatchEvent:
    async with asyncio.timeout(10):
        async for change in stream:
            if change["type"] != "BOOKMARK":
                return change
    raise AssertionError("the watch ended")


async def test_apply_of_a_new_pod_stores_nothing_and_sends_no_event(
    server: SimApiServer, kube: SimKubeClient, config: Path
) -> None:
    _, rv = await kube.list_pods()
    async with aclosing(kube.watch_pods(rv)) as stream:
        async with asyncio.timeout(10):
            assert (await anext(stream))["type"] == "BOOKMARK"  # the watch is open
        code, out, err = await dry(config, "apply", "-f", "-", stdin=pod_yaml())
        assert (code, out) == (0, "pod/x created (server dry run)\n"), err
        code, _, err = await kubectl(config, "get", "pod", "x")
        assert code == 1 and 'pods "x" not found' in err
        assert str(server.store.rv) == rv
        await kube.create_pod("default", {"metadata": {"name": "real"},
                                        "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
        change = await next_change(stream)
    assert (change["type"], change["object"]["metadata"]["name"]) == ("ADDED", "real")


async def test_create_answers_the_pod_it_would_store(server: SimApiServer, config: Path) -> None:
    code, out, err = await dry(config, "create", "-o", "json", "-f", "-",
                               stdin=pod_yaml("gpu-", generate=True))
    assert code == 0, err
    answer = json.loads(out)
    meta = answer["metadata"]
    assert meta["name"].startswith("gpu-") and len(meta["name"]) == len("gpu-") + 5
    assert meta["uid"] and meta["creationTimestamp"] and "resourceVersion" not in meta
    assert answer["spec"]["schedulerName"] == "default-scheduler" and answer["status"]["phase"] == "Pending"
    assert list(server.store.items("pods")) == []


async def test_patch_answers_the_patched_labels_and_keeps_the_stored_pod(
    server: SimApiServer, config: Path, stored: dict[str, Any]
) -> None:
    rv = server.store.rv
    code, out, err = await dry(config, "patch", "pod", "x", "-o", "json",
                               "-p", '{"metadata":{"labels":{"a":"2"}}}')
    assert code == 0, err
    answer = json.loads(out)
    assert answer["metadata"]["labels"] == {"a": "2"}
    assert answer["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert server.store.get("pods", "default", "x") is stored and server.store.rv == rv


@pytest.mark.parametrize(("verb", "printed"), [("apply", "configured"), ("replace", "replaced")])
async def test_apply_and_replace_of_a_changed_pod_keep_the_stored_pod(
    server: SimApiServer, config: Path, stored: dict[str, Any], verb: str, printed: str
) -> None:
    rv = server.store.rv
    code, out, err = await dry(config, verb, "-f", "-", stdin=pod_yaml(label="2", image="busybox:2"))
    assert (code, out) == (0, f"pod/x {printed} (server dry run)\n"), err
    assert server.store.get("pods", "default", "x") is stored and server.store.rv == rv


async def test_delete_leaves_the_pod(server: SimApiServer, config: Path, stored: dict[str, Any]) -> None:
    rv = server.store.rv
    code, out, err = await dry(config, "delete", "pod", "x")
    assert (code, out) == (0, 'pod "x" deleted (server dry run)\n'), err
    code, out, err = await kubectl(config, "get", "pod", "x", "-o", "name")
    assert (code, out) == (0, "pod/x\n"), err
    assert server.store.get("pods", "default", "x") is stored and server.store.rv == rv


REFUSED = {
    "immutable-field": (("patch", "pod", "x", "-p", '{"spec":{"containers":[{"name":"main","resources":'
                         '{"limits":{"nvidia.com/gpu":"2"}}}]}}'), None, FORBIDDEN),
    "name-taken": (("create", "-f", "-"), pod_yaml(), 'pods "x" already exists'),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
async def test_a_dry_run_is_refused_as_the_real_write_would_be(
    server: SimApiServer, config: Path, stored: dict[str, Any], case: tuple[tuple[str, ...], str | None, str]
) -> None:
    args, stdin, refusal = case
    code, _, err = await dry(config, *args, stdin=stdin)
    assert code == 1 and refusal in err
    assert server.store.get("pods", "default", "x") is stored


async def test_a_value_other_than_all_is_the_real_422(server: SimApiServer, stored: dict[str, Any]) -> None:
    pods = server.url + "/api/v1/namespaces/default/pods"
    body = {"metadata": {"name": "y"}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    async with aiohttp.ClientSession() as session:
        async with session.post(pods, params={"dryRun": "true"}, json=body) as response:
            created = response.status, await response.json()
        async with session.delete(pods + "/x", params={"dryRun": "Some"}) as response:
            deleted = response.status, await response.json()
        async with session.delete(pods + "/x", params={"dryRun": "Some"},
                                  json={"dryRun": ["All"]}) as response:
            from_body = response.status
    assert created[0] == 422 and created[1]["message"] == (
        'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"true"}: supported '
        'values: "All"')
    assert deleted[0] == 422 and deleted[1]["message"].startswith('DeleteOptions.meta.k8s.io "" is invalid')
    assert from_body == 200  # the body decides; the query is not read
    assert server.store.find("pods", "default", "y") is None
    assert server.store.get("pods", "default", "x") is stored


async def test_a_dry_run_create_calls_the_webhook_with_dry_run_true(
    server: SimApiServer, config: Path, webhook: Webhook
) -> None:
    server.add_webhook(WebhookConfig(name="vgpu.gpubus.io", url=webhook.url, ca_bundle=webhook.ca_pem))
    code, out, err = await dry(config, "create", "-o", "json", "-f", "-", stdin=pod_yaml())
    assert code == 0, err
    [review] = webhook.received
    assert review["request"]["dryRun"] is True and review["request"]["options"]["dryRun"] == ["All"]
    answer = json.loads(out)
    assert answer["metadata"]["annotations"] == {"gpubus.io/admitted": "true"}
    assert answer["spec"]["schedulerName"] == "gpubus-scheduler"
    assert server.store.find("pods", "default", "x") is None


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_webhook_with_side_effects_refuses_the_dry_run(
    server: SimApiServer, config: Path, webhook: Webhook, policy: Any
) -> None:
    server.add_webhook(WebhookConfig(name="vgpu.gpubus.io", url=webhook.url, ca_bundle=webhook.ca_pem,
                                     side_effects="Some", failure_policy=policy))
    code, _, err = await dry(config, "apply", "-f", "-", stdin=pod_yaml())
    assert code == 1 and "Error from server (BadRequest)" in err
    assert 'admission webhook "vgpu.gpubus.io" does not support dry run' in err
    assert webhook.received == [] and server.store.find("pods", "default", "x") is None
    code, out, err = await kubectl(config, "apply", "-f", "-", stdin=pod_yaml())
    assert (code, out) == (0, "pod/x created\n"), err
    assert [review["request"]["dryRun"] for review in webhook.received] == [False]
