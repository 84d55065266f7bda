"""The Helm chart: lint, render and strict schema validation, and the facts a cluster relies on.

Case matrix: every value set in ``helmchart.VALUE_SETS`` (default, HA, no webhook, legacy
metrics, cert-manager + ServiceMonitors, external NATS) is linted, rendered and validated with
kubernetes-validate --strict against the oldest supported and a current Kubernetes; then the
facts below are asserted on the rendered objects. Custom resources (cert-manager, Prometheus
Operator) have no bundled schema and get a structural check instead.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from clicheck import parse
from cryptography import x509
from helmchart import NAMESPACE, VALUE_SETS, chart_values, documents, find, lint, notes, render

from shared.bus import BusSettings

KUBE_VERSIONS = ("1.28.0", "1.33.0")
CUSTOM_KINDS = {"Certificate", "Issuer", "ServiceMonitor"}
MISSING_NATS = "chart directory is missing these dependencies: nats"
RESOURCE_NAMES = ["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                  "nvidia.com/gpucores", "nvidia.com/priority"]


def _container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def _scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(find(docs, "ConfigMap", "gpubus-scheduler")["data"]["config.yaml"])  # type: ignore[no-any-return]


def _rules(docs: list[dict[str, Any]], role: str) -> set[tuple[str, str]]:
    """(resource, verb) pairs a ClusterRole grants."""
    return {(res, verb) for rule in find(docs, "ClusterRole", role)["rules"]
            for res in rule["resources"] for verb in rule["verbs"]}


# -- lint, render, validate ---------------------------------------------------------------

@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_lint_reports_only_the_unvendored_nats_dependency(value_set: str) -> None:
    report = lint(VALUE_SETS[value_set])
    problems = [m for m in report["messages"] if m["severity"] >= 2 and m["error"] != MISSING_NATS]
    assert report["errors"] == [] and problems == []


@pytest.mark.parametrize("value_set", VALUE_SETS)
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_rendered_object_passes_strict_validation(value_set: str, kube_version: str) -> None:
    for doc in documents(VALUE_SETS[value_set]):
        if doc["kind"] in CUSTOM_KINDS:
            assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
            continue
        kubernetes_validate.validate(doc, kube_version, strict=True)


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_object_names_are_unique_per_kind(value_set: str) -> None:
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
            for d in documents(VALUE_SETS[value_set])]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(("values", "where"), [
    ({"webhook": {"failurePolicy": "Maybe"}}, "failurePolicy"),
    ({"scheduler": {"replicas": 0}}, "replicas"),
    ({"scheduler": {"leaderElection": {"resourceName": "kube-scheduler"}}}, "resourceName"),
    ({"scheduler": {"extender": {"weight": 0}}}, "weight"),
    ({"global": {"hookPath": "relative/path"}}, "hookPath"),
    ({"monitor": {"prot": 9394}}, "prot"),
    ({"global": {"nats": {"replicas": 6}}}, "replicas"),
])
def test_schema_rejects_bad_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmError, match=where):
        render(values)


def test_notes_tell_how_to_label_gpu_nodes_and_check_the_install() -> None:
    text = notes({})
    assert "kubectl label node <gpu-node> gpu=on" in text
    assert "nvidia.com/gpumem: 3000" in text


def _gpubus_commands(docs: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(service, flags) of every container that runs the gpubus image."""
    found = []
    for doc in docs:
        if doc["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if "/gpubus/gpubus:" in container["image"]:
                service, *flags = container["args"]
                found.append((service, flags))
    return found


@pytest.mark.parametrize("service", ["scheduler", "webhook", "node-agent", "monitor", "dashboard", "authn"])
def test_every_rendered_command_line_parses_with_the_real_cli(service: str) -> None:
    """Each value set's flags for ``service`` are accepted by ``gpubus <service>``."""
    command_lines = [flags for value_set in VALUE_SETS
                     for svc, flags in _gpubus_commands(documents(VALUE_SETS[value_set])) if svc == service]
    assert command_lines, f"no container runs gpubus {service}"
    for flags in command_lines:
        parse(service, flags)


# -- scheduler ------------------------------------------------------------------------------

def test_kube_scheduler_calls_gpubus_for_filter_prioritize_and_bind() -> None:
    config = _scheduler_config(documents({}))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    [extender] = config["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8080"
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == \
        ("filter", "prioritize", "bind")
    assert extender["nodeCacheCapable"] is True
    assert extender["weight"] > 0 and extender["ignorable"] is False
    assert extender["httpTimeout"] == "30s"


def test_extender_manages_every_gpubus_resource_and_kube_scheduler_ignores_them() -> None:
    [extender] = _scheduler_config(documents({}))["extenders"]
    assert [r["name"] for r in extender["managedResources"]] == RESOURCE_NAMES
    assert all(r["ignoredByScheduler"] is True for r in extender["managedResources"])


def test_extra_managed_resources_are_added_once() -> None:
    values = {"scheduler": {"extender": {"extraManagedResources": ["example.com/vram", "nvidia.com/gpu"]}}}
    [extender] = _scheduler_config(documents(values))["extenders"]
    assert [r["name"] for r in extender["managedResources"]] == [*RESOURCE_NAMES, "example.com/vram"]


def test_second_scheduler_has_its_own_name_and_leader_lease() -> None:
    config = _scheduler_config(documents({}))
    assert config["profiles"] == [{"schedulerName": "gpubus-scheduler"}]
    assert config["leaderElection"] == {"leaderElect": True, "resourceName": "gpubus-scheduler",
                                        "resourceNamespace": NAMESPACE}


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_one_scheduler_name_everywhere(value_set: str) -> None:
    """kube-scheduler's profile, the webhook's rewrite and the extender's pod watch agree."""
    values = VALUE_SETS[value_set]
    name = values.get("global", {}).get("schedulerName", "gpubus-scheduler")
    docs = documents(values)
    assert _scheduler_config(docs)["profiles"] == [{"schedulerName": name}]
    extender = _container(find(docs, "Deployment", "gpubus-scheduler"), "scheduler")
    assert f"--scheduler-name={name}" in extender["args"]
    webhooks = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpubus-webhook"]
    for webhook in webhooks:
        assert f"--scheduler-name={name}" in _container(webhook, "webhook")["args"]


def test_scheduler_pod_runs_kube_scheduler_beside_the_extender() -> None:
    deployment = find(documents({}), "Deployment", "gpubus-scheduler")
    kube = _container(deployment, "kube-scheduler")
    assert kube["image"].startswith("registry.k8s.io/kube-scheduler:v1.")
    assert "--config=/config/config.yaml" in kube["command"]
    ours = _container(deployment, "scheduler")
    assert ours["args"][0] == "scheduler"
    assert "--scheduler-name=gpubus-scheduler" in ours["args"]
    assert {"name": "http", "containerPort": 8080} in ours["ports"]


def test_ha_runs_two_spread_scheduler_replicas_with_a_disruption_budget() -> None:
    docs = documents(VALUE_SETS["ha"])
    deployment = find(docs, "Deployment", "gpubus-scheduler")
    assert deployment["spec"]["replicas"] == 2
    assert "podAntiAffinity" in deployment["spec"]["template"]["spec"]["affinity"]
    assert find(docs, "PodDisruptionBudget", "gpubus-scheduler")["spec"]["minAvailable"] == 1
    assert not [d for d in documents({}) if d["kind"] == "PodDisruptionBudget"]


def test_legacy_metrics_flag_reaches_scheduler_and_monitor() -> None:
    for value_set, expected in (("default", False), ("legacy-metrics", True)):
        docs = documents(VALUE_SETS[value_set])
        scheduler = _container(find(docs, "Deployment", "gpubus-scheduler"), "scheduler")
        monitor = _container(find(docs, "DaemonSet", "gpubus-node"), "monitor")
        assert ("--legacy-metrics" in scheduler["args"]) is expected
        assert ("--legacy-metrics" in monitor["args"]) is expected


# -- webhook --------------------------------------------------------------------------------

def test_webhook_fails_closed_and_has_no_side_effects() -> None:
    [hook] = find(documents({}), "MutatingWebhookConfiguration")["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert hook["clientConfig"]["service"] == {"name": "gpubus-webhook", "namespace": NAMESPACE,
                                               "path": "/webhook", "port": 443}
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]


def test_webhook_never_sees_its_own_namespace_or_opted_out_pods() -> None:
    [hook] = find(documents({}), "MutatingWebhookConfiguration")["webhooks"]
    by_key = {e["key"]: e for e in hook["namespaceSelector"]["matchExpressions"]}
    assert by_key["kubernetes.io/metadata.name"]["operator"] == "NotIn"
    assert NAMESPACE in by_key["kubernetes.io/metadata.name"]["values"]
    assert "kube-system" in by_key["kubernetes.io/metadata.name"]["values"]
    assert by_key["hami.io/webhook"] == {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert hook["objectSelector"]["matchExpressions"] == [by_key["hami.io/webhook"]]


def test_generated_serving_certificate_chains_to_the_ca_bundle_and_names_the_service() -> None:
    docs = documents({})
    [hook] = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    secret = find(docs, "Secret", "gpubus-webhook-tls")
    ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    assert secret["data"]["ca.crt"] == hook["clientConfig"]["caBundle"]
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"gpubus-webhook.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)


def test_cert_manager_issues_the_certificate_and_injects_the_ca() -> None:
    docs = documents(VALUE_SETS["cert-manager-and-servicemonitors"])
    webhook_config = find(docs, "MutatingWebhookConfiguration")
    assert webhook_config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{NAMESPACE}/gpubus-webhook"
    assert "caBundle" not in webhook_config["webhooks"][0]["clientConfig"]
    certificate = find(docs, "Certificate", "gpubus-webhook")
    assert certificate["spec"]["secretName"] == "gpubus-webhook-tls"
    assert f"gpubus-webhook.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {"name": "gpubus-webhook-selfsigned", "kind": "Issuer"}
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "gpubus-webhook-tls"]


def test_no_webhook_option_renders_no_admission_objects() -> None:
    docs = documents(VALUE_SETS["no-webhook"])
    assert not [d for d in docs if d["metadata"]["name"].startswith("gpubus-webhook")]
    assert not [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    assert "Set spec.schedulerName: gpubus-scheduler on GPU pods yourself" in notes(VALUE_SETS["no-webhook"])


def test_webhook_serves_tls_from_the_mounted_secret() -> None:
    deployment = find(documents({}), "Deployment", "gpubus-webhook")
    webhook = _container(deployment, "webhook")
    expected = {"--cert=/tls/tls.crt", "--key=/tls/tls.key", "--scheduler-name=gpubus-scheduler",
                "--in-cluster"}
    assert expected <= set(webhook["args"])
    [volume] = deployment["spec"]["template"]["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "gpubus-webhook-tls"


# -- node DaemonSet -------------------------------------------------------------------------

def test_node_daemonset_mounts_kubelet_dirs_and_hook_path_with_host_pids() -> None:
    daemonset = find(documents({}), "DaemonSet", "gpubus-node")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    assert spec["nodeSelector"] == {"gpu": "on"}
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    assert volumes["device-plugins"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    assert volumes["pod-resources"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    assert volumes["hook"]["path"] == "/usr/local/vgpu"
    assert {c["name"] for c in spec["containers"]} == {"node-agent", "monitor"}


def test_node_containers_get_their_node_name_from_the_downward_api() -> None:
    daemonset = find(documents({}), "DaemonSet", "gpubus-node")
    for name in ("node-agent", "monitor"):
        env = {e["name"]: e for e in _container(daemonset, name)["env"]}
        assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert any("$(NODE_NAME)" in arg for arg in _container(daemonset, name)["args"])


def test_node_containers_connect_with_their_pods_audience_bound_token() -> None:
    """Per-node identity: a projected token for gpubus authn's audience, the bus told its node."""
    daemonset = find(documents({}), "DaemonSet", "gpubus-node")
    spec = daemonset["spec"]["template"]["spec"]
    [token] = [v["projected"]["sources"][0]["serviceAccountToken"] for v in spec["volumes"]
               if v["name"] == "nats-token"]
    assert token == {"audience": "gpubus-nats", "expirationSeconds": 3600, "path": "token"}
    for name in ("node-agent", "monitor"):
        container = _container(daemonset, name)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["GPUBUS_BUS_TOKEN_FILE"] == "/var/run/secrets/gpubus/nats/token"
        assert env["GPUBUS_BUS_NODE"] == "$(NODE_NAME)"
        assert "GPUBUS_BUS_PASSWORD" not in env and "GPUBUS_BUS_USER" not in env
        assert {"name": "nats-token", "mountPath": "/var/run/secrets/gpubus/nats", "readOnly": True} \
            in container["volumeMounts"]


def test_authn_reviews_tokens_of_the_node_service_account_only() -> None:
    docs = documents({})
    authn = _container(find(docs, "Deployment", "gpubus-authn"), "authn")
    assert "--service-account=gpubus-system:gpubus-node" in authn["args"]
    assert "--audience=gpubus-nats" in authn["args"] and "--in-cluster" in authn["args"]
    env = {e["name"]: e for e in authn["env"]}
    assert env["GPUBUS_BUS_USER"]["value"] == "authn"
    rules = find(docs, "ClusterRole", "gpubus-authn")["rules"]
    review = {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    assert review in rules
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]} in rules
    job = find(docs, "Job", "gpubus-authn-keygen")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert _container(job, "keygen")["args"] == ["authn-keygen", "--secret=gpubus-nats-callout",
                                                 "--namespace=gpubus-system"]


def test_only_node_containers_run_as_root() -> None:
    docs = documents({})
    daemonset = find(docs, "DaemonSet", "gpubus-node")
    assert _container(daemonset, "node-agent")["securityContext"]["runAsUser"] == 0
    restricted = (("scheduler", "scheduler"), ("scheduler", "kube-scheduler"), ("webhook", "webhook"),
                  ("dashboard", "dashboard"))
    for name, container in restricted:
        context = _container(find(docs, "Deployment", f"gpubus-{name}"), container)["securityContext"]
        assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False


# -- RBAC -----------------------------------------------------------------------------------

def test_each_service_has_its_own_service_account() -> None:
    docs = documents({})
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert accounts == {"gpubus-scheduler", "gpubus-webhook", "gpubus-node", "gpubus-dashboard",
                        "gpubus-authn", "gpubus-authn-keygen"}
    for kind, name in (("Deployment", "gpubus-scheduler"), ("Deployment", "gpubus-webhook"),
                       ("DaemonSet", "gpubus-node"), ("Deployment", "gpubus-dashboard"),
                       ("Deployment", "gpubus-authn"), ("Job", "gpubus-authn-keygen")):
        assert find(docs, kind, name)["spec"]["template"]["spec"]["serviceAccountName"] == name


def test_scheduler_may_bind_and_patch_pods_but_not_delete_them() -> None:
    """Preemption evicts (pods/eviction, which PodDisruptionBudgets govern), never deletes."""
    rules = _rules(documents({}), "gpubus-scheduler")
    assert {("pods", "get"), ("pods", "list"), ("pods", "watch"), ("pods", "patch"),
            ("pods/binding", "create"), ("pods/eviction", "create"), ("pods/status", "patch"),
            ("nodes", "get"), ("nodes", "list"), ("nodes", "watch"), ("events", "create")} <= rules
    assert not {verb for res, verb in rules if verb in ("delete", "deletecollection", "*") or res == "*"}
    assert not {verb for res, verb in rules if res == "nodes" and verb not in ("get", "list", "watch")}


def test_scheduler_lease_rights_cover_only_its_own_lease() -> None:
    role = find(documents({}), "Role", "gpubus-scheduler-leader-election")
    named = [r for r in role["rules"] if "resourceNames" in r]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": ["gpubus-scheduler"], "verbs": ["get", "update"]}]


def test_webhook_only_reads_quotas_and_namespaces() -> None:
    assert _rules(documents({}), "gpubus-webhook") == {
        ("resourcequotas", "get"), ("resourcequotas", "list"), ("resourcequotas", "watch"),
        ("namespaces", "get")}


def test_node_agent_and_monitor_patch_nodes_and_read_pods_only() -> None:
    """nodes/status: the node-agent publishes the node's GPU memory and cores."""
    assert _rules(documents({}), "gpubus-node") == {
        ("nodes", "get"), ("nodes", "patch"), ("nodes/status", "patch"), ("pods", "get"), ("pods", "list")}


# -- NATS -----------------------------------------------------------------------------------

def _nats_users() -> dict[str, dict[str, Any]]:
    accounts = chart_values()["nats"]["config"]["merge"]["accounts"]
    return {u["user"]: u for account in ("GPUBUS", "AUTH") for u in accounts[account]["users"]}


def test_every_service_connects_as_its_own_nats_user_with_a_password_from_the_secret() -> None:
    docs = documents({})
    secret = find(docs, "Secret", "gpubus-nats-auth")
    assert set(secret["data"]) == set(_nats_users())
    workloads = {("Deployment", "gpubus-scheduler", "scheduler"): "scheduler",
                 ("Deployment", "gpubus-webhook", "webhook"): "webhook",
                 ("Deployment", "gpubus-dashboard", "dashboard"): "dashboard",
                 ("Deployment", "gpubus-authn", "authn"): "authn"}  # nodes: their token (test above)
    for (kind, name, container), user in workloads.items():
        env = {e["name"]: e for e in _container(find(docs, kind, name), container)["env"]}
        assert env["GPUBUS_BUS_URL"]["value"] == f"nats://gpubus-nats.{NAMESPACE}.svc:4222"
        assert env["GPUBUS_BUS_USER"]["value"] == user
        assert env["GPUBUS_BUS_PASSWORD"]["valueFrom"] == {
            "secretKeyRef": {"name": "gpubus-nats-auth", "key": user}}


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_nats_env_of_every_gpubus_container_names_real_bus_settings(value_set: str) -> None:
    fields = {f"GPUBUS_BUS_{f.name.upper()}" for f in dataclasses.fields(BusSettings)}
    for doc in documents(VALUE_SETS[value_set]):
        if doc["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            names = {e["name"] for e in container.get("env", []) if e["name"].startswith("GPUBUS_BUS_")}
            assert names <= fields, sorted(names - fields)
            if "/gpubus/gpubus:" in container["image"]:
                assert "GPUBUS_BUS_URL" in names


def test_nats_server_reads_each_password_from_the_env_the_secret_fills() -> None:
    nats = chart_values()["nats"]
    env = nats["container"]["env"]
    for name, user in _nats_users().items():
        variable = user["password"].removeprefix("<< $").removesuffix(" >>")
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": "gpubus-nats-auth", "key": name}
    assert nats["config"]["jetstream"]["enabled"] is True


_NATS_CONTAINERS = {("Deployment", "gpubus-scheduler", "scheduler"),
                    ("Deployment", "gpubus-webhook", "webhook"),
                    ("DaemonSet", "gpubus-node", "node-agent"), ("DaemonSet", "gpubus-node", "monitor")}


def _replicas_env(values: dict[str, Any]) -> set[str]:
    """GPUBUS_BUS_REPLICAS of every gpubus container that talks to NATS (one value expected)."""
    docs = documents(values)
    return {next(e["value"] for e in _container(find(docs, kind, name), container)["env"]
                 if e["name"] == "GPUBUS_BUS_REPLICAS")
            for kind, name, container in _NATS_CONTAINERS}


@pytest.mark.parametrize(("values", "replicas"), [
    ({}, "1"),
    (VALUE_SETS["ha"], "3"),
    ({"nats": {"config": {"cluster": {"enabled": True}}}}, "3"),
    ({"nats": {"config": {"cluster": {"enabled": True, "replicas": 5}}}}, "3"),
    ({"nats": {"config": {"cluster": {"enabled": True, "replicas": 5}}}, "global": {"nats": {"replicas": 5}}},
     "5"),
    (VALUE_SETS["external-nats"], "1"),
    ({**VALUE_SETS["external-nats"],
      "global": {"nats": {"url": "nats://a:4222,nats://b:4222", "replicas": 3}}}, "3"),
])
def test_stream_and_bucket_replicas_follow_the_nats_cluster(values: dict[str, Any], replicas: str) -> None:
    # A clustered bundled NATS gets R3 stream and buckets, so losing one NATS server loses nothing.
    assert _replicas_env(values) == {replicas}


def test_nats_sends_every_client_but_the_static_users_to_the_callout() -> None:
    nats = chart_values()["nats"]
    callout = nats["config"]["merge"]["authorization"]["auth_callout"]
    assert callout["account"] == "AUTH" and set(callout["auth_users"]) == set(_nats_users())
    assert "node-agent" not in _nats_users() and "monitor" not in _nats_users()
    variable = callout["issuer"].removeprefix("<< $").removesuffix(" >>")
    assert nats["container"]["env"][variable]["valueFrom"]["secretKeyRef"] == {
        "name": "gpubus-nats-callout", "key": "issuer.pub"}


def test_external_nats_uses_the_given_url_and_secret() -> None:
    docs = documents(VALUE_SETS["external-nats"])
    assert not [d for d in docs if d["metadata"]["name"] == "gpubus-nats-auth"]
    env = {e["name"]: e for e in _container(find(docs, "Deployment", "gpubus-scheduler"), "scheduler")["env"]}
    assert env["GPUBUS_BUS_URL"]["value"] == "nats://nats.infra:4222"
    assert env["GPUBUS_BUS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "my-nats-users"


# -- monitoring -----------------------------------------------------------------------------

def test_service_monitors_scrape_scheduler_and_every_node_monitor() -> None:
    docs = documents(VALUE_SETS["cert-manager-and-servicemonitors"])
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"gpubus-scheduler", "gpubus-monitor"}
    for name, port in (("gpubus-scheduler", "http"), ("gpubus-monitor", "metrics")):
        service = find(docs, "Service", name)
        selector = monitors[name]["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()
        assert monitors[name]["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert monitors[name]["spec"]["endpoints"][0]["port"] == port
    assert find(docs, "Service", "gpubus-monitor")["spec"]["clusterIP"] == "None"
    assert not [d for d in documents({}) if d["kind"] == "ServiceMonitor"]



# -- dashboard ------------------------------------------------------------------------------

def test_dashboard_is_served_with_probes_and_no_kubernetes_credentials() -> None:
    docs = documents({})
    deployment = find(docs, "Deployment", "gpubus-dashboard")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert not [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
                and d["subjects"][0]["name"] == "gpubus-dashboard"]
    container = _container(deployment, "dashboard")
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "--kubeconfig" not in " ".join(container["args"]) and "--in-cluster" not in container["args"]
    service = find(docs, "Service", "gpubus-dashboard")
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    assert not [d for d in docs if d["kind"] == "Ingress"]


def test_dashboard_ingress_routes_its_host_to_the_service() -> None:
    ingress = find(documents(VALUE_SETS["dashboard-ingress"]), "Ingress", "gpubus-dashboard")
    rule = ingress["spec"]["rules"][0]
    assert ingress["spec"]["ingressClassName"] == "nginx" and rule["host"] == "gpus.example.com"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "gpubus-dashboard", "port": {"name": "http"}}


def test_dashboard_can_be_left_out() -> None:
    docs = documents({"dashboard": {"enabled": False}})
    assert not [d for d in docs if d["metadata"]["name"] == "gpubus-dashboard"]
