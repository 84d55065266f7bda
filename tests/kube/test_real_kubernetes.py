"""gpubus on the real Kubernetes v1.37 control plane (``gpubus_local.kube``), one stack for the module.

The real kube-apiserver calls gpubus's webhook (registered by the chart's
MutatingWebhookConfiguration), the real kube-scheduler, configured from the chart's ConfigMap,
calls the extender, and a real kubelet per node calls the node-agent's device plugin; the services
run with tokens of the chart's ServiceAccounts.

Cases: the chart's objects all accepted and its RBAC enough for each service, and a call outside
it refused; every example admitted, scheduled, allocated (env as the runtime was asked, devices as
the kubelet's pod-resources API reports) and Running, the cannot-fit one with kube-scheduler's
FailedScheduling event carrying gpubus's reasons; per-node NATS identity from real TokenRequest and
TokenReview, a token of another service account refused; a Deployment, a Job and a StatefulSet as
users write them, and a rollout that leaks no slice; the scheduler leader killed while pods arrive.
Every test ends with the e2e invariants (no over-commit, ledger == live pods, no stuck lease).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from asyncwait import wait_until
from kube_harness import KubeE2E, kubectl, running_kube_stack
from nats_refusal import refused_at_connect

from gpubus_local.kube.stack import NAMESPACE, RELEASE
from shared.requests import parse_quantity

pytestmark = pytest.mark.timeout(900)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKLOADS = "workloads"
PLACED_FIRST = ("pod-gpu-uuid", "pod-exclusive")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def kube(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KubeE2E]:
    async with running_kube_stack(tmp_path_factory.mktemp("kube"), nodes=3, devices="4xA100-80GB",
                                  scheduler_replicas=2) as handle:
        yield handle


def _ok(done: Any) -> str:
    assert done.returncode == 0, f"kubectl {done.args[3:]}: {done.stderr[-2000:]}"
    return str(done.stdout)


async def test_chart_objects_are_all_served(kube: KubeE2E) -> None:
    """Every object ``helm install`` made is on the API server, read back as the admin."""
    stack = kube.stack
    manifest = _run_helm(stack, "get", "manifest", RELEASE, "--namespace", NAMESPACE)
    objects = [d for d in yaml.safe_load_all(manifest) if d]
    assert len(objects) > 20, manifest[:500]
    for obj in objects:
        kind, meta = obj["kind"], obj["metadata"]
        args = ["get", kind, meta["name"], "-o", "name"]
        if meta.get("namespace"):
            args += ["--namespace", meta["namespace"]]
        _ok(kubectl(stack, *args))
    status = json.loads(_run_helm(stack, "status", RELEASE, "--namespace", NAMESPACE, "-o", "json"))
    assert status["info"]["status"] == "deployed"


def _run_helm(stack: Any, *args: str) -> str:
    import subprocess
    assert stack.spec.binaries is not None
    done = subprocess.run([str(stack.spec.binaries["helm"]), "--kubeconfig", str(stack.kubeconfig), *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("component", "allowed", "refused"), [
    ("scheduler", ("get", "pods", "--all-namespaces"), ("get", "secrets", "--namespace", "kube-system")),
    ("webhook", ("get", "resourcequotas", "--all-namespaces"), ("delete", "node", "node-1")),
    ("authn", ("get", "pod", "{node-pod}", "--namespace", NAMESPACE),
     ("get", "pods", "--namespace", NAMESPACE)),
    ("node", ("get", "node", "node-1"), ("get", "secrets", "--namespace", NAMESPACE)),
])
async def test_service_accounts_get_what_the_chart_grants_and_nothing_more(
        kube: KubeE2E, component: str, allowed: tuple[str, ...], refused: tuple[str, ...]) -> None:
    node_pod = await kube.stack.node_pod("node-1")
    config = await kube.stack.service_kubeconfig(component, pod=node_pod if component == "node" else None)
    allowed = tuple(node_pod["metadata"]["name"] if a == "{node-pod}" else a for a in allowed)
    _ok(kubectl(kube.stack, *allowed, kubeconfig=config))
    done = kubectl(kube.stack, *refused, kubeconfig=config)
    assert done.returncode != 0 and "forbidden" in done.stderr.lower(), done.stderr


async def test_every_example_runs_with_the_env_hami_core_reads(kube: KubeE2E) -> None:
    stack = kube.stack
    names: dict[str, str] = {}

    async def create(stem: str) -> str:
        created = _ok(kubectl(stack, "create", "-f", str(EXAMPLES / f"{stem}.yaml"), "-o", "name"))
        names[stem] = created.strip().removeprefix("pod/")
        return names[stem]

    # The one-card pod wants GPU 0 of node-1 and the 4-card exclusive pod a whole node, which it
    # never leaves: placed first, in this order, the exclusive pod cannot take node-1 from it.
    for stem in PLACED_FIRST:
        await kube.wait_phase([await create(stem)], {"Running"}, timeout=60)
    for path in sorted(EXAMPLES.glob("pod-*.yaml")):
        if path.stem not in PLACED_FIRST:
            await create(path.stem)
    running = [n for stem, n in names.items() if stem != "pod-cannot-fit"]
    await kube.wait_phase(running, {"Running", "Succeeded"}, timeout=120)
    devices = await kube.devices()
    records = {(r["pod"], r["container"]): r for r in kube.records()}
    for name in running:
        pod = kube.pods[name]
        for container in pod["spec"]["containers"]:
            limits = {k: parse_quantity(v) for k, v in
                      ((container.get("resources") or {}).get("limits") or {}).items()}
            if "nvidia.com/gpu" not in limits:
                continue
            record = records[(name, container["name"])]
            env = record["envs"]
            assert env.get("NVIDIA_VISIBLE_DEVICES"), (name, env)
            assert len(devices[("default", name)][container["name"]]) == int(limits["nvidia.com/gpu"]), name
            if "nvidia.com/gpumem" in limits:
                assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{limits['nvidia.com/gpumem']}m", (name, env)
            if "nvidia.com/gpucores" in limits:
                assert env["CUDA_DEVICE_SM_LIMIT"] == str(limits["nvidia.com/gpucores"]), (name, env)
            assert any(m["containerPath"].endswith("libvgpu.so") for m in record["mounts"] or []) or \
                env.get("CUDA_DISABLE_CONTROL") == "true" or "nvidia.com/gpumem" not in limits, (name, record)
    cannot = names["pod-cannot-fit"]
    event = await kube.wait_event(cannot, "FailedScheduling", timeout=60)
    assert "gpubus" in event["message"] or "insufficient" in event["message"].lower(), event["message"]
    await kube.check_invariants()
    _ok(kubectl(stack, "delete", "pod", *names.values(), "--wait=false"))


async def test_node_agents_connect_as_their_nodes_and_other_tokens_are_refused(kube: KubeE2E) -> None:
    stack = kube.stack
    assert stack.api is not None
    metrics = await _get_text(f"http://127.0.0.1:{stack.ports.authn}/metrics")
    accepted = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("gpubus_authn_allowed_total "))
    assert accepted >= len(stack.node_names()), metrics
    token = await stack.api.token(NAMESPACE, f"{RELEASE}-webhook", audiences=["gpubus-nats"])
    assert stack.nats is not None
    assert await refused_at_connect(stack.nats.port, token)



async def _get_text(url: str) -> str:
    import aiohttp
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.text()


def _workloads(replicas: int, image: str) -> str:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 20}
    template = {"metadata": {"labels": {"app": "trainer"}},
                "spec": {"containers": [{"name": "main", "image": image, "resources": {"limits": limits}}]}}
    job_template = {"metadata": {"labels": {"app": "batch"}},
                    "spec": {"restartPolicy": "Never", "containers": template["spec"]["containers"]}}
    def meta(name: str) -> dict[str, str]:
        return {"name": name, "namespace": WORKLOADS}
    docs = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("trainer"),
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "trainer"}},
                  "template": template}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("batch"),
         "spec": {"parallelism": 2, "completions": 2, "template": job_template}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("shard"),
         "spec": {"replicas": 2, "serviceName": "shard", "selector": {"matchLabels": {"app": "shard"}},
                  "template": {**template, "metadata": {"labels": {"app": "shard"}}}}},
    ]
    return yaml.safe_dump_all(docs)


async def test_deployment_job_statefulset_run_and_a_rollout_leaks_no_slice(kube: KubeE2E) -> None:
    stack = kube.stack
    kubectl(stack, "create", "namespace", WORKLOADS)
    _ok(kubectl(stack, "apply", "-f", "-", input_text=_workloads(3, "cuda:12.4")))

    def workload_pods() -> list[dict[str, Any]]:
        return [p for p in kube.pods.values() if p["metadata"]["namespace"] == WORKLOADS
                and not p["metadata"].get("deletionTimestamp")]

    def all_running(count: int, image: str) -> bool:
        pods = workload_pods()
        return len(pods) == count and all(
            (p.get("status") or {}).get("phase") == "Running" and
            p["spec"]["containers"][0]["image"] == image for p in pods)
    await wait_until(lambda: all_running(7, "cuda:12.4"), 180, what="3 + 2 + 2 workload pods Running")
    before = {p["metadata"]["uid"] for p in workload_pods() if p["metadata"]["name"].startswith("trainer")}
    _ok(kubectl(stack, "set", "image", "deployment/trainer", "main=cuda:12.5", "--namespace", WORKLOADS))
    _ok(kubectl(stack, "rollout", "status", "deployment/trainer", "--namespace", WORKLOADS, "--timeout=180s"))

    def rolled() -> bool:
        trainers = [p for p in workload_pods() if p["metadata"]["name"].startswith("trainer")]
        return len(trainers) == 3 and not before & {p["metadata"]["uid"] for p in trainers} and all(
            (p.get("status") or {}).get("phase") == "Running" for p in trainers)
    await wait_until(rolled, 180, what="the Deployment's 3 new pods Running and its old ones gone")
    await kube.check_invariants()
    _ok(kubectl(stack, "delete", "namespace", WORKLOADS, "--wait=false"))


async def test_scheduler_leader_killed_while_pods_arrive(kube: KubeE2E) -> None:
    """kill -9 of the leading gpubus scheduler, restarted as the kubelet would restart it."""
    stack = kube.stack
    leader = await _leader(kube)
    pods = [_pod(f"failover-{i}") for i in range(12)]
    await kube.create(*pods[:6])
    child = stack.children[leader]
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    await child.wait_exit()
    await child.start()  # as the kubelet restarts a dead container of the chart's scheduler pod
    await kube.create(*pods[6:])
    await kube.wait_phase([p["metadata"]["name"] for p in pods], {"Running"}, timeout=180)
    await child.wait_ready(120)
    await kube.check_invariants()
    _ok(kubectl(stack, "delete", "pod", *[p["metadata"]["name"] for p in pods], "--wait=false"))


def _pod(name: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 5}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]}}


async def _leader(kube: KubeE2E) -> str:
    """The scheduler child that leads, as its /metrics says."""
    found: list[str] = []

    async def one_leads() -> bool:
        found.clear()
        for name in ("scheduler", "scheduler-2"):
            port = kube.stack.ports.schedulers[0 if name == "scheduler" else 1]
            text = await _get_text(f"http://127.0.0.1:{port}/metrics")
            if any(line.startswith("gpubus_scheduler_leader ") and line.endswith(" 1.0")
                   for line in text.splitlines()):
                found.append(name)
        return len(found) == 1
    await wait_until(one_leads, 60, what="one scheduler leading")
    return found[0]
