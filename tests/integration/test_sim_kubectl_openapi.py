"""The real kubectl validating, creating and explaining objects against the SimApiServer, and the
OpenAPI v3 endpoint it reads, over loopback.

Case matrix:
- ``kubectl apply -f -`` and ``kubectl create -f -`` of a GPU pod without ``--validate=false``:
  created, with the server doing the validation (``fieldValidation=Strict``; kubectl never asks for
  ``/openapi/v2``);
- the ``resouces:`` typo: refused by apply and create with the real unknown-field message, not
  stored; with ``--validate=warn`` stored without the field and the warning printed;
- Node, Namespace and ResourceQuota: applied and re-applied (a PATCH, Strict) unchanged and changed;
  a typo in each is refused, on create (400) and on the re-apply's patch (422);
- a ``kind: List`` file (what ``kubectl get -o yaml`` writes), which kubectl checks against
  ``/openapi/v2``: replaced, and an item with a typo refused by the server;
- ``kubectl explain pod.spec.containers.resources.limits`` documents the GPU resources;
- HTTP: the root and the group document with ETag, 304 on ``If-None-Match``, the immutable cache
  headers under a hash, 301 to the current hash, 404 for an unknown group, 406 for protobuf only;
  v2 as protobuf or JSON, 406 for anything else;
  an unsupported ``fieldValidation`` is the real 422; a client that sends none (our services) gets
  its write with the unknown fields dropped and a ``Warning`` header.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
import sim_fixtures
from kubectl import kubectl, needs_kubectl

from gpubus_local.sim.apiserver import SimApiServer

GPU_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: main
    image: nvidia/cuda:12.4.0-base-ubuntu22.04
    {resources}:
      limits:
        nvidia.com/gpu: 1
        nvidia.com/gpumem: 3000
        nvidia.com/gpucores: 30
"""

CLUSTER_OBJECTS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  {labels}: {{team: a}}
---
apiVersion: v1
kind: ResourceQuota
metadata:
  name: gpu-quota
  namespace: team-a
spec:
  {hard}:
    limits.nvidia.com/gpumem: "20000"
    limits.nvidia.com/gpucores: "200"
---
apiVersion: v1
kind: Node
metadata:
  name: node-x
  labels: {{gpu: "on"}}
spec:
  {unschedulable}: {value}
"""


def cluster_objects(*, labels: str = "labels", hard: str = "hard", unschedulable: str = "unschedulable",
                    value: str = "false") -> str:
    return CLUSTER_OBJECTS.format(labels=labels, hard=hard, unschedulable=unschedulable, value=value)


# this module's SimApiServer and its kubeconfig (bound by name: see sim_fixtures)
server = sim_fixtures.server
config = sim_fixtures.config


def typo_message(path: str) -> str:
    return f'strict decoding error: unknown field "{path}"'


# -- kubectl --------------------------------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("verb", ["apply", "create"])
async def test_kubectl_creates_a_gpu_pod_with_validation_on(verb: str, server: SimApiServer,
                                                             config: Path) -> None:
    rc, out, err = await kubectl(config, verb, "-f", "-", "-v=6",
                                 stdin=GPU_POD.format(name="shared", resources="resources"))
    assert rc == 0, err
    assert "pod/shared created" in out
    assert "fieldValidation=Strict" in err and "/openapi/v2" not in err
    limits = server.store.get("pods", "default", "shared")["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpumem"] == 3000


@needs_kubectl
@pytest.mark.parametrize("verb", ["apply", "create"])
async def test_the_resouces_typo_is_refused_and_nothing_is_stored(verb: str, server: SimApiServer,
                                                                   config: Path) -> None:
    rc, _, err = await kubectl(config, verb, "-f", "-",
                               stdin=GPU_POD.format(name="typo", resources="resouces"))
    assert rc != 0
    assert ('Pod in version "v1" cannot be handled as a Pod: '
            + typo_message("spec.containers[0].resouces")) in err
    assert server.store.find("pods", "default", "typo") is None


@needs_kubectl
async def test_validate_warn_stores_the_pod_without_the_field_and_prints_the_warning(
    server: SimApiServer, config: Path
) -> None:
    rc, out, err = await kubectl(config, "create", "--validate=warn", "-f", "-",
                                 stdin=GPU_POD.format(name="warned", resources="resouces"))
    assert rc == 0, err
    assert "pod/warned created" in out
    assert 'Warning: unknown field "spec.containers[0].resouces"' in err
    container = server.store.get("pods", "default", "warned")["spec"]["containers"][0]
    assert "resouces" not in container and "resources" not in container


@needs_kubectl
async def test_node_namespace_and_quota_are_applied_with_validation(server: SimApiServer,
                                                                     config: Path) -> None:
    rc, out, err = await kubectl(config, "apply", "-f", "-", stdin=cluster_objects())
    assert rc == 0, err
    assert {"namespace/team-a created", "resourcequota/gpu-quota created", "node/node-x created"} <= set(
        out.splitlines())
    rc, out, err = await kubectl(config, "apply", "-f", "-", stdin=cluster_objects())
    assert rc == 0 and out.count("unchanged") == 3, err
    rc, out, err = await kubectl(config, "apply", "-f", "-", "-v=6", stdin=cluster_objects(value="true"))
    assert rc == 0 and "node/node-x configured" in out, err
    assert "PATCH" in err and "fieldValidation=Strict" in err
    assert server.store.get("nodes", "", "node-x")["spec"]["unschedulable"] is True


@needs_kubectl
@pytest.mark.parametrize(("typo", "path"), [
    ({"labels": "lables"}, "metadata.lables"),
    ({"hard": "hardd"}, "spec.hardd"),
    ({"unschedulable": "unschedulabl"}, "spec.unschedulabl"),
])
async def test_a_typo_in_a_cluster_object_is_refused_on_create_and_on_reapply(
    typo: dict[str, str], path: str, server: SimApiServer, config: Path
) -> None:
    rc, _, err = await kubectl(config, "create", "-f", "-", stdin=cluster_objects(**typo))
    assert rc != 0 and typo_message(path) in err and "cannot be handled as a" in err
    rc, _, err = await kubectl(config, "apply", "-f", "-", stdin=cluster_objects())
    assert rc == 0, err
    rc, _, err = await kubectl(config, "apply", "-f", "-", stdin=cluster_objects(**typo))
    assert rc != 0 and "patch: Invalid value:" in err and typo_message(path) in err


@needs_kubectl
async def test_a_list_file_is_validated_by_the_server_item_by_item(config: Path) -> None:
    rc, _, err = await kubectl(config, "apply", "-f", "-", stdin=cluster_objects())
    assert rc == 0, err
    rc, listed, err = await kubectl(config, "get", "nodes,namespaces", "-o", "yaml")
    assert rc == 0 and listed.startswith("apiVersion: v1\nitems:"), err
    rc, out, err = await kubectl(config, "replace", "-f", "-", stdin=listed)
    assert rc == 0 and "node/node-x replaced" in out, err
    rc, listed, err = await kubectl(config, "get", "nodes", "-o", "yaml")
    assert rc == 0, err
    typo = listed.replace("unschedulable: false", "unschedulabl: false")
    rc, _, err = await kubectl(config, "replace", "-f", "-", stdin=typo)
    assert rc != 0 and typo_message("spec.unschedulabl") in err


@needs_kubectl
async def test_explain_documents_the_gpu_resources_of_a_container(config: Path) -> None:
    rc, out, err = await kubectl(config, "explain", "pod.spec.containers.resources.limits")
    assert rc == 0, err
    assert "FIELD: limits <map[string]Quantity>" in out
    for name in ("nvidia.com/gpu:", "nvidia.com/gpumem:", "nvidia.com/gpumem-percentage:",
                 "nvidia.com/gpucores:"):
        assert name in out
    rc, out, err = await kubectl(config, "explain", "pod.spec.containers")
    assert rc == 0 and "resources\t<ResourceRequirements>" in out, err


# -- HTTP -----------------------------------------------------------------------------------------


async def test_the_documents_are_served_with_the_real_caching_headers(server: SimApiServer) -> None:
    group = server.openapi.groups["api/v1"]
    url = f"{server.url}/openapi/v3/api/v1?hash={group.etag}"
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url + "/openapi/v3") as r:
            assert r.status == 200 and r.headers["Etag"] == f'"{server.openapi.root.etag}"'
            assert (await r.json())["paths"]["api/v1"]["serverRelativeURL"] == url.removeprefix(server.url)
        async with http.get(url, headers={"Accept": "application/json"}) as r:
            assert r.status == 200 and await r.read() == group.body
            assert r.headers["Cache-Control"] == "public, immutable" and r.headers["Vary"] == "Accept"
            assert r.headers["Etag"] == f'"{group.etag}"' and "Expires" in r.headers
        async with http.get(url, headers={"If-None-Match": f'"{group.etag}"'}) as r:
            assert r.status == 304
        async with http.get(f"{server.url}/openapi/v3/api/v1?hash=OLD", allow_redirects=False) as r:
            assert r.status == 301 and r.headers["Location"] == url.removeprefix(server.url)
        async with http.get(f"{server.url}/openapi/v3/api/v1") as r:
            assert r.status == 200 and "Cache-Control" not in r.headers
        async with http.get(f"{server.url}/openapi/v3/apis/apps/v1") as r:
            assert r.status == 404
        proto = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"
        async with http.get(url, headers={"Accept": proto}) as r:
            assert r.status == 406
        v2 = server.url + "/openapi/v2"
        kubectl_asks = {"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
        async with http.get(v2, headers=kubectl_asks) as r:
            assert r.status == 200 and await r.read() == server.openapi.v2_protobuf.body
            assert r.content_type == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        async with http.get(v2) as r:
            assert r.status == 200 and (await r.json())["swagger"] == "2.0"
        async with http.get(v2, headers={"Accept": "text/html"}) as r:
            assert r.status == 406


async def test_an_unsupported_field_validation_is_the_real_422(server: SimApiServer) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    url = f"{server.url}/api/v1/namespaces/default/pods?fieldValidation=strict"
    async with aiohttp.ClientSession() as http, http.post(url, json=pod) as r:
        status = await r.json()
    assert r.status == 422 and status["reason"] == "Invalid"
    assert status["message"] == ('CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported '
                                 'value: "strict": supported values: "", "Ignore", "Strict", "Warn"')
    assert server.store.find("pods", "default", "p") is None


async def test_a_client_without_field_validation_gets_warnings_and_the_fields_dropped(
    server: SimApiServer,
) -> None:
    """What our own services (kubernetes_asyncio, no fieldValidation) get: the real default, Warn."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "resouces": {}}]}}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{server.url}/api/v1/namespaces/default/pods", json=pod) as r:
            assert r.status == 201
            assert r.headers.getall("Warning") == [r'299 - "unknown field \"spec.containers[0].resouces\""']
        merge = {"Content-Type": "application/merge-patch+json"}
        async with http.patch(f"{server.url}/api/v1/namespaces/default/pods/p/status", headers=merge,
                              json={"status": {"phase": "Running", "podIp": "10.0.0.1"}}) as r:
            assert r.status == 200
            assert r.headers.getall("Warning") == [r'299 - "unknown field \"status.podIp\""']
        async with http.patch(f"{server.url}/api/v1/namespaces/default/pods/p/status?fieldValidation=Strict",
                              headers=merge, json={"status": {"podIp": "10.0.0.1"}}) as r:
            assert r.status == 422
    stored = server.store.get("pods", "default", "p")
    assert stored["status"]["phase"] == "Running" and "podIp" not in stored["status"]
    assert "resouces" not in stored["spec"]["containers"][0]
