"""gpubus in DRA mode on the real Kubernetes v1.37 control plane, one stack for the module.

The chart installed with ``mode: dra``: its DeviceClass and example ResourceClaimTemplates; each
node-agent publishes a ResourceSlice (one device per GPU, consumable ``memory`` and ``cores``)
and registers a DRA kubelet plugin with the real kubelet; the real kube-scheduler (the default
profile, DRA on as 1.37 ships it) allocates claims, the kubelet asks the node-agent to prepare
them and hands the runtime the CDI device the node-agent wrote.

Cases: a pod with a claim for part of a card Running with the CDI device recorded by the runtime
and HAMi-core's limits in the spec; two claims sharing one card within its capacity and a third
that would overflow it Pending; a claim bigger than any card Pending with kube-scheduler's
reason; an unhealthy card tainted (and a claim for it Pending until it recovers); the pod's
deletion unprepares (CDI spec and state gone, allocation.released); a
node-agent restart keeps a prepared claim; the node-agent's token may write ResourceSlices but
not delete a Node. HAMi pod specs (the examples, unchanged) run as claims the webhook made from
their nvidia.com/gpu limits; the webhook's token may create claim templates, nothing more; a
template of gpubus's name that is not gpubus's refuses the pod; a dry run creates no template.
The event stream as in extender mode: allocated -> allocation.decided (the scheduler's leader,
with the pod's containers and the cards' shares), prepared -> allocation.applied, deleted ->
allocation.released; the monitor reports the container's limit from them. ``gpubus explain
--pending`` says why a claim waits: kube-scheduler's reason and each card's room.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from asyncwait import wait_until
from kube_harness import KubeE2E, kubectl, running_kube_stack

from gpubus_local.kube.stack import NAMESPACE, KubeStack
from services.node_agent.health import health_subject
from services.webhook.claims import ClaimSettings, ClaimShape, template
from shared.codec import decode

pytestmark = pytest.mark.timeout(900)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODE = "node-1"
GiB = 1 << 30
ON_CARD_0 = 'device.attributes["gpubus.io"].index == 0'
Json = dict[str, Any]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def kube(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KubeE2E]:
    async with running_kube_stack(tmp_path_factory.mktemp("dra"), nodes=1, devices="2xA100-80GB",
                                  mode="dra") as handle:
        yield handle


def _apply(stack: KubeStack, *docs: Json) -> None:
    done = kubectl(stack, "apply", "-f", "-", input_text="\n---\n".join(json.dumps(d) for d in docs))
    assert done.returncode == 0, done.stderr


def _claim(name: str, *, memory: str, cores: str = "0", selector: str | None = None) -> Json:
    exactly: Json = {"deviceClassName": "gpubus.io",
                     "capacity": {"requests": {"memory": memory, "cores": cores}}}
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def _pod(name: str, *, claim: str | None = None, template: str | None = None) -> Json:
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "cuda:12.4",
                                     "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", **source}]}}


async def _get(stack: KubeStack, path: str) -> Json | None:
    assert stack.api is not None
    return await stack.api.get(path)


async def _running(stack: KubeStack, name: str, timeout: float = 120) -> Json:  # noqa: ASYNC109
    found: list[Json] = []

    async def running() -> bool:
        pod = await _get(stack, f"/api/v1/namespaces/default/pods/{name}")
        if pod is not None and pod.get("status", {}).get("phase") == "Running":
            found[:] = [pod]
        return bool(found)
    await wait_until(running, timeout, what=f"pod {name} Running")
    return found[0]


async def _allocation(stack: KubeStack, claim: str) -> Json:
    found = await _get(stack, f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{claim}")
    assert found is not None, claim
    results: list[Json] = found["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1, results
    return {"uid": found["metadata"]["uid"], **results[0]}


def _record(kube: KubeE2E, pod: str) -> Json:
    records = [r for r in kube.records() if r["pod"] == pod and r["container"] == "main"]
    assert records, f"the runtime was never asked to create {pod}/main"
    return records[-1]


def _cdi_env(stack: KubeStack, claim_uid: str) -> dict[str, str]:
    spec = json.loads((stack.cdi_dir(NODE) / f"gpubus.io-{claim_uid}.json").read_text())
    assert spec["kind"] == "gpubus.io/gpu"
    [device] = spec["devices"]
    assert device["name"] == claim_uid
    return dict(e.split("=", 1) for e in device["containerEdits"]["env"])


async def _delete(stack: KubeStack, *objects: str) -> None:
    done = kubectl(stack, "delete", "--namespace", "default", "--wait=false", "--ignore-not-found", *objects)
    assert done.returncode == 0, done.stderr


async def test_chart_serves_the_device_class_and_the_node_slice(kube: KubeE2E) -> None:
    """The chart's DeviceClass and claim templates exist; the node's slice has each GPU shareable
    with consumable memory (MiB steps) and cores (0-100)."""
    stack = kube.stack
    assert await _get(stack, "/apis/resource.k8s.io/v1/deviceclasses/gpubus.io") is not None
    templates = await _get(stack, f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates")
    assert templates is not None
    assert {t["metadata"]["name"] for t in templates["items"]} >= {"gpubus-gpu-10g", "gpubus-gpu-whole"}
    found = await _get(stack, f"/apis/resource.k8s.io/v1/resourceslices/{NODE}-gpubus-io")
    assert found is not None
    spec = found["spec"]
    assert spec["driver"] == "gpubus.io" and spec["nodeName"] == NODE and spec["pool"]["name"] == NODE
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    for device in spec["devices"]:
        assert device["allowMultipleAllocations"] is True
        memory, cores = device["capacity"]["memory"], device["capacity"]["cores"]
        assert memory["value"] == "80Gi"
        assert memory["requestPolicy"]["validRange"]["step"] == "1Mi"
        assert cores["value"] == "100" and cores["requestPolicy"]["validRange"]["max"] == "100"
        assert set(device["attributes"]) == {"uuid", "productName", "index", "numa"}


async def test_pod_with_part_of_a_card_runs_with_its_cdi_device(kube: KubeE2E) -> None:
    """A claim for 10 GiB and 30 % of a card: allocated by kube-scheduler, prepared by the
    node-agent, the container created with the CDI device whose edits carry HAMi-core's limits."""
    stack = kube.stack
    _apply(stack, _claim("part", memory="10Gi", cores="30"), _pod("dra-part", claim="part"))
    await _running(stack, "dra-part")
    allocated = await _allocation(stack, "part")
    assert allocated["driver"] == "gpubus.io" and allocated["pool"] == NODE
    assert allocated["consumedCapacity"] == {"memory": "10Gi", "cores": "30"}
    assert allocated.get("shareID")
    record = _record(kube, "dra-part")
    assert record["cdiDevices"] == [f"gpubus.io/gpu={allocated['uid']}"]
    env = _cdi_env(stack, allocated["uid"])
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    await _delete(stack, "pod/dra-part", "resourceclaim/part")


async def test_two_claims_share_a_card_within_its_capacity(kube: KubeE2E) -> None:
    """Two 30 GiB claims on card 0 share it (two shares of one device); a third 30 GiB claim on
    it would exceed its 80 GiB, so its pod stays Pending with kube-scheduler's reason."""
    stack = kube.stack
    _apply(stack, *(_claim(f"share-{i}", memory="30Gi", cores="40", selector=ON_CARD_0) for i in (1, 2)),
           _pod("dra-share-1", claim="share-1"), _pod("dra-share-2", claim="share-2"))
    await asyncio.gather(_running(stack, "dra-share-1"), _running(stack, "dra-share-2"))
    one, two = await _allocation(stack, "share-1"), await _allocation(stack, "share-2")
    assert one["device"] == two["device"] == "gpu-0"
    assert one["shareID"] != two["shareID"]
    envs = [_cdi_env(stack, a["uid"]) for a in (one, two)]
    assert envs[0]["NVIDIA_VISIBLE_DEVICES"] == envs[1]["NVIDIA_VISIBLE_DEVICES"]
    assert [e["CUDA_DEVICE_MEMORY_LIMIT_0"] for e in envs] == ["30720m", "30720m"]

    _apply(stack, _claim("share-3", memory="30Gi", selector=ON_CARD_0), _pod("dra-share-3", claim="share-3"))
    event = await kube.wait_event("dra-share-3", "FailedScheduling", timeout=60)
    assert "cannot allocate all claims" in event["message"], event["message"]
    pod = await _get(stack, "/api/v1/namespaces/default/pods/dra-share-3")
    assert pod is not None and pod["status"]["phase"] == "Pending"
    await _delete(stack, *(f"pod/dra-share-{i}" for i in (1, 2, 3)),
                  *(f"resourceclaim/share-{i}" for i in (1, 2, 3)))


async def test_claim_bigger_than_any_card_stays_pending(kube: KubeE2E) -> None:
    """100 GiB fits no 80 GiB card: no allocation, kube-scheduler says why."""
    stack = kube.stack
    _apply(stack, _claim("huge", memory="100Gi"), _pod("dra-huge", claim="huge"))
    event = await kube.wait_event("dra-huge", "FailedScheduling", timeout=60)
    assert "cannot allocate all claims" in event["message"], event["message"]
    claim = await _get(stack, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/huge")
    assert claim is not None and not claim.get("status", {}).get("allocation")
    await _delete(stack, "pod/dra-huge", "resourceclaim/huge")


async def test_deleting_the_pod_unprepares_its_claim(kube: KubeE2E) -> None:
    """A pod from the chart's claim template: its claim prepared, then on deletion unprepared:
    the CDI spec and the state file gone, and allocation.released on the bus."""
    stack = kube.stack
    released: list[Any] = []
    sub = await kube.bus.nc.subscribe("gpubus.allocation.released.>", cb=_collect(released))
    await kube.bus.nc.flush()  # the server has the subscription before anything it must see happens
    try:
        _apply(stack, _template("gpubus-gpu-10g"), _pod("dra-tmpl", template="gpubus-gpu-10g"))
        await _running(stack, "dra-tmpl")
        pod = await _get(stack, "/api/v1/namespaces/default/pods/dra-tmpl")
        assert pod is not None
        claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        uid = (await _allocation(stack, claim_name))["uid"]
        cdi = stack.cdi_dir(NODE) / f"gpubus.io-{uid}.json"
        state = stack.dra_plugin_dir(NODE) / "claims" / f"{uid}.json"
        assert cdi.is_file() and state.is_file()
        assert _cdi_env(stack, uid)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
        await _delete(stack, "pod/dra-tmpl")
        await wait_until(lambda: not cdi.exists() and not state.exists(), 120,
                         what="the claim's CDI spec and state removed")
        await wait_until(lambda: any(pod["metadata"]["uid"] == e.pod_uid for e in released), 30,
                         what="allocation.released for the pod")
    finally:
        await sub.unsubscribe()


def _template(name: str) -> Json:
    """The chart's template of that name, copied into the default namespace (templates are
    namespaced: a pod names one of its own namespace)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": _claim(name, memory="10Gi", cores="30")["spec"]}}


def _collect(into: list[Any]) -> Any:
    async def cb(msg: Any) -> None:
        into.append(decode(msg.data))
    return cb


async def test_unhealthy_card_is_tainted_and_gets_no_claims(kube: KubeE2E) -> None:
    """Card 1 reported unhealthy: its device is tainted in a new pool generation, a claim for it
    stays Pending; healthy again, the taint goes and the claim's pod runs."""
    stack = kube.stack
    path = f"/apis/resource.k8s.io/v1/resourceslices/{NODE}-gpubus-io"
    generation = (await _get(stack, path) or {})["spec"]["pool"]["generation"]

    async def taints(present: bool, after: int) -> bool:
        found = await _get(stack, path) or {}
        gpu1 = next(d for d in found["spec"]["devices"] if d["name"] == "gpu-1")
        return found["spec"]["pool"]["generation"] > after and bool(gpu1.get("taints")) == present
    await _health(kube, healthy=False)
    try:
        await wait_until(lambda: taints(True, generation), 30, what="gpu-1 tainted in a new generation")
        [taint] = next(d for d in (await _get(stack, path) or {})["spec"]["devices"]
                       if d["name"] == "gpu-1")["taints"]
        assert taint["key"] == "gpubus.io/unhealthy" and taint["effect"] == "NoSchedule"
        on_card_1 = 'device.attributes["gpubus.io"].index == 1'
        _apply(stack, _claim("sick", memory="1Gi", selector=on_card_1), _pod("dra-sick", claim="sick"))
        await kube.wait_event("dra-sick", "FailedScheduling", timeout=60)
    finally:
        await _health(kube, healthy=True)
    await wait_until(lambda: taints(False, generation + 1), 30, what="gpu-1's taint removed")
    await _running(stack, "dra-sick")
    assert (await _allocation(stack, "sick"))["device"] == "gpu-1"
    await _delete(stack, "pod/dra-sick", "resourceclaim/sick")


async def _health(kube: KubeE2E, *, healthy: bool) -> None:
    """The simulated card 1 of the node marked (un)healthy, as an XID would (the node-agent's
    fault-injection query)."""
    payload = {"index": 1, "healthy": healthy, **({} if healthy else {"reason": "XID 79"})}
    reply = json.loads(await kube.bus.request(health_subject(NODE), json.dumps(payload).encode(), timeout=5))
    assert reply["ok"] is True, reply


async def test_node_agent_restart_keeps_prepared_claims(kube: KubeE2E) -> None:
    """The node-agent restarted under a prepared claim: the claim's CDI spec stays, the kubelet
    re-registers the plugin, a new pod's claim is prepared, and the old pod's deletion still
    unprepares its claim (from the state on disk)."""
    stack = kube.stack
    _apply(stack, _claim("keep", memory="5Gi"), _pod("dra-keep", claim="keep"))
    await _running(stack, "dra-keep")
    uid = (await _allocation(stack, "keep"))["uid"]
    cdi = stack.cdi_dir(NODE) / f"gpubus.io-{uid}.json"
    before = cdi.read_text()
    slice_path = f"/apis/resource.k8s.io/v1/resourceslices/{NODE}-gpubus-io"
    generation = (await _get(stack, slice_path) or {})["spec"]["pool"]["generation"]
    agent = stack.children[f"node-agent-{NODE}"]
    registrations = _registrations(agent.log_path)
    await agent.stop()
    await agent.start()
    await agent.wait_ready(60)
    # the kubelet took the new plugin (a pod prepared before that waits out the kubelet's backoff)
    await wait_until(lambda: _registrations(agent.log_path) > registrations, 60,
                     what="the kubelet registering the restarted plugin")
    assert cdi.read_text() == before
    # the same devices again: the pool keeps its generation
    assert (await _get(stack, slice_path) or {})["spec"]["pool"]["generation"] == generation
    _apply(stack, _claim("after", memory="5Gi"), _pod("dra-after", claim="after"))
    await _running(stack, "dra-after")
    await _delete(stack, "pod/dra-keep")
    await wait_until(lambda: not cdi.exists(), 120, what="the pre-restart claim unprepared")
    await _delete(stack, "pod/dra-after", "resourceclaim/keep", "resourceclaim/after")


def _registrations(log: Path) -> int:
    """How often the node-agent's log says the kubelet registered its DRA plugin."""
    return log.read_text(errors="replace").count("the kubelet registered DRA driver")


async def test_node_token_may_write_slices_but_not_delete_nodes(kube: KubeE2E, tmp_path: Path) -> None:
    """The node-agent's ServiceAccount (the chart's RBAC in DRA mode): ResourceSlices and claims
    allowed, deleting a Node refused."""
    stack = kube.stack
    kubeconfig = await stack.service_kubeconfig("node")
    allowed = kubectl(stack, "auth", "can-i", "create", "resourceslices.resource.k8s.io",
                      kubeconfig=kubeconfig)
    assert allowed.stdout.strip() == "yes", allowed.stderr
    claims = kubectl(stack, "auth", "can-i", "get", "resourceclaims.resource.k8s.io", "-A",
                     kubeconfig=kubeconfig)
    assert claims.stdout.strip() == "yes", claims.stderr
    refused = kubectl(stack, "delete", "node", NODE, "--dry-run=server", kubeconfig=kubeconfig)
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr


def _create(stack: KubeStack, path: Path, *extra: str) -> str:
    done = kubectl(stack, "create", "-f", str(path), "-o", "name", *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().removeprefix("pod/")


async def _claim_of(stack: KubeStack, pod: Json) -> Json:
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = await _get(stack, f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/"
                              f"{status['resourceClaimName']}")
    assert claim is not None
    return claim


async def test_hami_pod_specs_run_unchanged_as_claims(kube: KubeE2E) -> None:
    """examples/pod-small.yaml and pod-two-cards.yaml as they are: the webhook points each at a
    claim template of its shape (made in the pod's namespace) and drops the nvidia.com limits;
    kube-scheduler allocates, the node-agent prepares HAMi-core's limits from the claim."""
    stack = kube.stack
    small, two = _create(stack, EXAMPLES / "pod-small.yaml"), _create(stack, EXAMPLES / "pod-two-cards.yaml")
    pods = await asyncio.gather(_running(stack, small), _running(stack, two))
    for pod, shape in zip(pods, ("gpubus-1x8192mi-20c", "gpubus-2x16384mi-30c-"), strict=True):
        assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith(shape)
        [container] = pod["spec"]["containers"]
        assert container["resources"] == {"claims": [{"name": "gpubus-0"}]}, container["resources"]
    small_claim, two_claim = await _claim_of(stack, pods[0]), await _claim_of(stack, pods[1])
    [result] = small_claim["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"] == {"memory": "8Gi", "cores": "20"}
    env = _cdi_env(stack, small_claim["metadata"]["uid"])
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT"]) == ("8192m", "20")
    results = two_claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]  # two cards, never one twice
    env = _cdi_env(stack, two_claim["metadata"]["uid"])
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "16384m"
    made = await _get(stack, "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates/"
                             "gpubus-1x8192mi-20c")
    assert made is not None and made["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpubus-webhook"
    await _delete(stack, f"pod/{small}", f"pod/{two}")


async def test_webhook_token_may_create_claim_templates_and_nothing_more(kube: KubeE2E) -> None:
    """The chart's webhook ServiceAccount in DRA mode: create and get claim templates; changing or
    deleting one, or making a claim, refused by the real API server."""
    stack = kube.stack
    kubeconfig = await stack.service_kubeconfig("webhook")

    def can(*args: str) -> str:
        return kubectl(stack, "auth", "can-i", *args, kubeconfig=kubeconfig).stdout.strip()
    assert can("create", "resourceclaimtemplates.resource.k8s.io", "-n", "default") == "yes"
    assert can("get", "resourceclaimtemplates.resource.k8s.io", "-n", "default") == "yes"
    for verb in ("update", "delete", "list"):
        assert can(verb, "resourceclaimtemplates.resource.k8s.io", "-n", "default") == "no", verb
    assert can("create", "resourceclaims.resource.k8s.io", "-n", "default") == "no"
    _apply(stack, _template("gpubus-victim"))
    refused = kubectl(stack, "delete", "resourceclaimtemplate", "gpubus-victim", "-n", "default",
                      "--dry-run=server", kubeconfig=kubeconfig)
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
    await _delete(stack, "resourceclaimtemplate/gpubus-victim")


async def test_a_template_not_made_by_gpubus_refuses_the_pod(kube: KubeE2E, tmp_path: Path) -> None:
    """Someone else's template under the name gpubus would give the shape: the pod is refused,
    saying so, instead of getting that template's claim. A dry run creates no template."""
    stack = kube.stack
    shape = ClaimShape(count=1, memory_mib=4000, cores=10)
    squatter = template(shape, "default", ClaimSettings()).body
    squatter["metadata"]["annotations"] = {}
    squatter["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "70Gi"
    _apply(stack, squatter)
    pod = tmp_path / "pod.json"
    pod.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dra-squatted", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "cuda:12.4", "resources": {"limits": {
            "nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 10}}}]}}))
    refused = kubectl(stack, "create", "-f", str(pod))
    assert refused.returncode != 0 and "is not the one gpubus would make" in refused.stderr, refused.stderr
    await _delete(stack, f"resourceclaimtemplate/{shape.template_name}")

    dry = ClaimShape(count=1, memory_mib=4001, cores=10).template_name
    pod.write_text(pod.read_text().replace("4000", "4001"))
    _create(stack, pod, "--dry-run=server")
    templates = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates"
    assert await _get(stack, f"{templates}/{dry}") is None


async def _monitor_limit(stack: KubeStack, pod: str) -> float | None:
    """The monitor's hami_vgpu_memory_limit_bytes for ``pod``'s container, if it reports one."""
    url = f"http://127.0.0.1:{stack.ports.monitor}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith("hami_vgpu_memory_limit_bytes{") and f'pod="{pod}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_events_read_as_in_extender_mode(kube: KubeE2E) -> None:
    """A HAMi pod in DRA mode: allocation.decided when kube-scheduler allocated its claim (its
    container, card and share), allocation.applied when prepared, allocation.released once gone;
    the monitor shows the container's 8 GiB limit meanwhile; no mismatch or failure is reported."""
    stack = kube.stack
    seen: list[Any] = []
    sub = await kube.bus.nc.subscribe("gpubus.allocation.>", cb=_collect(seen))
    # the server has the subscription before the pod exists (kubectl below blocks the loop, so
    # an unflushed SUB could reach it after the claim was allocated and prepared)
    await kube.bus.nc.flush()
    try:
        name = _create(stack, EXAMPLES / "pod-small.yaml")
        pod = await _running(stack, name)
        uid = pod["metadata"]["uid"]

        def of_pod(kind: str) -> list[Any]:
            def uid_of(e: Any) -> str | None:
                return getattr(e, "pod_uid", None) or getattr(getattr(e, "allocation", None), "pod_uid", None)
            return [e for e in seen if kind == e.KIND and uid_of(e) == uid]
        await wait_until(lambda: bool(of_pod("allocation.decided") and of_pod("allocation.applied")), 60,
                         what="allocation.decided and .applied for the pod")
        a = of_pod("allocation.decided")[0].allocation
        assert (a.namespace, a.name, a.node, a.containers) == ("default", name, NODE, ("main",))
        [[card]] = a.devices
        assert (card.usedmem, card.usedcores) == (8192, 20) and card.uuid.startswith("GPU-")
        assert of_pod("allocation.applied")[0].device_ids == (card.uuid,)
        async def reported() -> bool:
            return await _monitor_limit(stack, name) == 8192 * (1 << 20)
        await wait_until(reported, 60, what="the monitor reporting the pod's 8 GiB limit")
        await _delete(stack, f"pod/{name}")
        await wait_until(lambda: bool(of_pod("allocation.released")), 120,
                         what="allocation.released for the pod")
        # the node-agent in DRA mode takes no decision for a device-plugin handoff to check
        assert not of_pod("allocation.mismatch") and not of_pod("allocation.failed")
    finally:
        await sub.unsubscribe()


async def test_explain_says_why_a_pending_claim_waits(kube: KubeE2E) -> None:
    """A HAMi pod asking 100 GiB of a card, run as a claim: `gpubus explain --pending` prints
    kube-scheduler's FailedScheduling reason and, per card, that 102400 MiB is more than is free;
    exit code 1 (no node has room)."""
    stack = kube.stack
    _apply(stack, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dra-why", "namespace": "default"},
                   "spec": {"containers": [{"name": "main", "image": "cuda:12.4", "resources": {"limits": {
                       "nvidia.com/gpu": 1, "nvidia.com/gpumem": 102400}}}]}})
    await kube.wait_event("dra-why", "FailedScheduling", timeout=60)
    argv = [sys.executable, "-m", "gpubus", "explain", "--pending", "default/dra-why",
            "--kubeconfig", str(stack.kubeconfig)]
    done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=60,
                                   check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "kube-scheduler: " in done.stdout and "cannot allocate all claims" in done.stdout, done.stdout
    assert done.stdout.count("memory: asks 102400 MiB") == 2, done.stdout  # both cards
    assert "nodes with 1 fitting card(s): none" in done.stdout
    await _delete(stack, "pod/dra-why")
