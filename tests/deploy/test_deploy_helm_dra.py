"""The chart in DRA mode (``mode: dra`` / ``node-label``): DeviceClass, claim templates, the node
ServiceAccount's extra rights, the node-agent's flags and host directories. Rendered offline."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from clicheck import parse
from helmchart import documents, find, render

DRA = {"mode": "dra"}


def _rules(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(group, res, verb) for rule in find(docs, "ClusterRole", "gpubus-node")["rules"]
            for group in rule["apiGroups"] for res in rule["resources"] for verb in rule["verbs"]}


def _node_agent(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = find(docs, "DaemonSet", "gpubus-node")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "node-agent")


def test_extender_mode_renders_no_dra_objects_or_rights() -> None:
    docs = documents({})
    assert not [d for d in docs if d["kind"] in ("DeviceClass", "ResourceClaimTemplate")]
    assert not [r for r in _rules(docs) if r[0] == "resource.k8s.io"]
    assert "--mode=extender" in _node_agent(docs)["args"]


@pytest.mark.parametrize("mode", ["dra", "node-label"])
def test_dra_mode_has_a_device_class_templates_and_least_rights(mode: str) -> None:
    docs = documents({"mode": mode})
    device_class = find(docs, "DeviceClass", "gpubus.io")
    assert device_class["apiVersion"] == "resource.k8s.io/v1"
    assert device_class["spec"]["selectors"] == [{"cel": {"expression": 'device.driver == "gpubus.io"'}}]
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    assert set(templates) == {"gpubus-gpu-10g", "gpubus-gpu-half", "gpubus-gpu-whole"}
    [request] = templates["gpubus-gpu-10g"]["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "gpubus.io", "count": 1,
                                  "capacity": {"requests": {"memory": "10Gi", "cores": "30"}}}
    [whole] = templates["gpubus-gpu-whole"]["spec"]["spec"]["devices"]["requests"]
    assert "capacity" not in whole["exactly"]
    dra_rules = {r for r in _rules(docs) if r[0] == "resource.k8s.io"}
    assert ("resource.k8s.io", "resourceclaims", "get") in dra_rules
    assert {verb for _, res, verb in dra_rules if res == "resourceclaims"} == {"get"}
    assert ("resource.k8s.io", "resourceslices", "create") in dra_rules
    assert not {res for _, res, _ in dra_rules} - {"resourceclaims", "resourceslices"}


def test_node_agent_gets_its_dra_flags_and_host_dirs() -> None:
    docs = documents(DRA)
    agent = _node_agent(docs)
    args = agent["args"]
    assert {"--mode=dra", "--dra-driver=gpubus.io", "--dra-registry-dir=/var/lib/kubelet/plugins_registry",
            "--dra-plugin-dir=/var/lib/kubelet/plugins/gpubus.io", "--cdi-dir=/var/run/cdi"} <= set(args)
    parse("node-agent", args[1:])  # the real CLI accepts them
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert mounts["dra-registry"] == "/var/lib/kubelet/plugins_registry"
    assert mounts["cdi"] == "/var/run/cdi"
    pod = find(docs, "DaemonSet", "gpubus-node")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dra-plugin"]["hostPath"]["path"] == "/var/lib/kubelet/plugins/gpubus.io"


@pytest.mark.parametrize(("values", "where"), [
    ({"mode": "both"}, "mode"),
    ({"mode": "dra", "dra": {"driver": "Not A Domain"}}, "driver"),
    ({"mode": "dra", "dra": {"cdiDir": "relative"}}, "cdiDir"),
    ({"mode": "dra", "dra": {"claimTemplates": {"t": {"count": 0}}}}, "count"),
])
def test_schema_rejects_bad_dra_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmError, match=where):
        render(values)


def _webhook_rules(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(group, res, verb) for rule in find(docs, "ClusterRole", "gpubus-webhook")["rules"]
            for group in rule["apiGroups"] for res in rule["resources"] for verb in rule["verbs"]}


def _webhook_args(docs: list[dict[str, Any]]) -> list[str]:
    pod = find(docs, "Deployment", "gpubus-webhook")["spec"]["template"]["spec"]
    return list(next(c for c in pod["containers"] if c["name"] == "webhook")["args"])


def test_webhook_translates_gpu_limits_only_in_dra_mode_with_the_least_rights() -> None:
    """mode dra: the webhook runs with --mode=dra (flags the real CLI accepts), may create and get
    claim templates and nothing else of resource.k8s.io, and says it has side effects except on a
    dry run. Extender and node-label modes: none of that."""
    docs = documents(DRA)
    args = _webhook_args(docs)
    assert {"--mode=dra", "--dra-device-class=gpubus.io", "--dra-driver=gpubus.io"} <= set(args)
    parse("webhook", args[1:])
    dra_rules = {r for r in _webhook_rules(docs) if r[0] == "resource.k8s.io"}
    assert dra_rules == {("resource.k8s.io", "resourceclaimtemplates", "create"),
                         ("resource.k8s.io", "resourceclaimtemplates", "get")}
    [hook] = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["sideEffects"] == "NoneOnDryRun"
    for mode in ("extender", "node-label"):
        docs = documents({"mode": mode})
        assert not any(a.startswith("--mode") for a in _webhook_args(docs))
        assert not [r for r in _webhook_rules(docs) if r[0] == "resource.k8s.io"]
        assert find(docs, "MutatingWebhookConfiguration")["webhooks"][0]["sideEffects"] == "None"


@pytest.mark.parametrize(("mode", "follows"), [("extender", False), ("dra", True), ("node-label", True)])
def test_scheduler_follows_claims_where_any_node_may_be_dra(mode: str, follows: bool) -> None:
    """The scheduler's leader publishes allocation.decided for the driver's claims (flags the real
    CLI accepts); its kube-scheduler roles already let it list and watch claims."""
    pod = find(documents({"mode": mode}), "Deployment", "gpubus-scheduler")["spec"]["template"]["spec"]
    args = next(c for c in pod["containers"] if c["name"] == "scheduler")["args"]
    assert ("--dra-driver=gpubus.io" in args) is follows
    parse("scheduler", args[1:])
