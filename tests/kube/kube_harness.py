"""The real-control-plane harness: a :class:`KubeStack` started in-test, with the e2e handles.

:func:`running_kube_stack` yields a :class:`KubeE2E`: the e2e harness's pod cache, waits and
invariant checks (:mod:`e2e_harness`), on the real API server, where what each container got from
Allocate is read back as a user could: the device IDs from each kubelet's pod-resources API, the
env from what the kubelet asked its (fake) runtime to create.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from e2e_harness import E2E, e2e_handles
from e2e_invariants import Facts

from gpubus_local.kube.binaries import Binaries, BinariesMissing, find_binaries
from gpubus_local.kube.stack import KubeStack, KubeStackSpec
from proto.podresources.v1 import api_pb2 as pr
from proto.podresources.v1 import api_pb2_grpc as pr_grpc


def kube_binaries() -> Binaries:
    """The built binaries, or a skip that says how to build them; with ``GPUBUS_REQUIRE_KUBE=1``
    (.ci/run, which builds them first) they are built if missing and never skipped."""
    if os.environ.get("GPUBUS_REQUIRE_KUBE") == "1":
        return find_binaries(build=True)
    try:
        return find_binaries(build=False)
    except BinariesMissing as e:
        pytest.skip(f"the real control plane is not built here: {e}")


async def pod_resources(socket: Path) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(namespace, pod) -> container -> device IDs, from a kubelet's pod-resources List."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        answer = await pr_grpc.PodResourcesListerStub(channel).List(pr.ListPodResourcesRequest(), timeout=10)
    return {(p.namespace, p.name): {c.name: [i for d in c.devices for i in d.device_ids]
                                    for c in p.containers}
            for p in answer.pod_resources}


class KubeE2E(E2E):
    """:class:`E2E` on the real control plane."""

    stack: KubeStack  # type: ignore[assignment]

    def records(self) -> list[dict[str, Any]]:
        """Every container the kubelets asked their fake runtimes to create (last one per name wins)."""
        assert self.stack.plane is not None
        found: list[dict[str, Any]] = []
        for node in self.stack.plane.nodes.values():
            for path in sorted(node.paths.recorded.glob("*.json")):
                record = json.loads(path.read_text())
                found.append({**record, "node": node.name})
        return found

    def admissions(self) -> dict[str, dict[str, Any]]:
        """pod uid -> its containers' env, as the kubelets asked their runtimes to create them."""
        out: dict[str, dict[str, Any]] = {}
        for record in self.records():
            entry = out.setdefault(record["podUid"], {
                "node": record["node"], "namespace": record["namespace"], "name": record["pod"],
                "uid": record["podUid"], "containers": {}})
            entry["containers"][record["container"]] = {"envs": record["envs"], "device_ids": []}
        return out

    async def devices(self) -> dict[tuple[str, str], dict[str, list[str]]]:
        """(namespace, pod) -> container -> device IDs, from every kubelet's pod-resources API."""
        assert self.stack.plane is not None
        found: dict[tuple[str, str], dict[str, list[str]]] = {}
        for node in self.stack.plane.nodes.values():
            found.update(await pod_resources(node.paths.pod_resources))
        return found

    async def facts(self) -> Facts:
        """The e2e facts, with each container's device IDs as its kubelet reports them."""
        facts = await super().facts()
        devices = await self.devices()
        for entry in facts.admissions.values():
            per_container = devices.get((entry["namespace"], entry["name"]), {})
            for name, container in entry["containers"].items():
                # the pod-resources API reports app containers (and sidecars), not init containers
                container["device_ids"] = per_container.get(name)
        return facts


def kubectl(stack: KubeStack, *args: str, input_text: str | None = None,
            kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real kubectl against the stack (the admin's kubeconfig unless another is given)."""
    assert stack.spec.binaries is not None
    argv = [str(stack.spec.binaries["kubectl"]), "--kubeconfig", str(kubeconfig or stack.kubeconfig), *args]
    return subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=60, check=False)


@contextlib.asynccontextmanager
async def running_kube_stack(data_dir: Path, **spec: Any) -> AsyncIterator[KubeE2E]:
    """A started :class:`KubeStack` (stopped again, also when its start fails) with the e2e handles."""
    async with KubeStack(KubeStackSpec(data_dir=data_dir, binaries=kube_binaries(), **spec)) as stack, \
            e2e_handles(stack, KubeE2E) as handle:
        yield handle
