"""The Kubernetes client of the stand-ins and the tests: the product's client plus the writes only they make.

:class:`shared.kube.KubeClient` carries the calls the services make. A kubelet (pod status,
registering its node), kube-scheduler (pod status), an event recorder, and tests that set a
cluster up (namespaces, quotas, nodes, replacing and deleting objects) need more; those calls live
here so the product's client stays the product's. Same raw-JSON decoding and error mapping.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any, cast

from shared.kube import MERGE_PATCH, WATCH_TIMEOUT_S, KubeClient, NotFound, selector_kwargs
from shared.kube_types import Event, Node, Pod, ResourceQuota, WatchEvent


class SimKubeClient(KubeClient):
    """``KubeClient`` plus the stand-ins' and tests' calls. Build with :meth:`from_kubeconfig`."""

    # service accounts ----------------------------------------------------------

    async def request_token(self, namespace: str, service_account: str, *, audiences: list[str],
                            expiration_s: int, pod: tuple[str, str] | None = None) -> str:
        """A TokenRequest (what a kubelet asks for a projected token); ``pod`` = (name, uid) binds it."""
        spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": expiration_s}
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod[0], "uid": pod[1]}
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        body = await self._call("request token", self._core.create_namespaced_service_account_token,
                                service_account, namespace, request)
        return str(body.get("status", {}).get("token", ""))

    # pods ------------------------------------------------------------------

    async def patch_pod_status(self, namespace: str, name: str, merge_patch: dict[str, Any]) -> Pod:
        """Merge-patch the ``status`` subresource (the kubelet's and the scheduler's writes)."""
        return cast(Pod, await self._call("patch pod status", self._core.patch_namespaced_pod_status, name,
                                          namespace, merge_patch, _content_type=MERGE_PATCH))

    async def replace_pod(self, namespace: str, name: str, pod: Pod) -> Pod:
        """PUT; a stale ``metadata.resourceVersion`` raises ``Conflict``."""
        return cast(Pod, await self._call("replace pod", self._core.replace_namespaced_pod, name, namespace,
                                          pod))

    async def delete_pod(self, namespace: str, name: str) -> None:
        await self._call("delete pod", self._core.delete_namespaced_pod, name, namespace)

    # nodes -----------------------------------------------------------------

    async def get_node(self, name: str) -> Node | None:
        try:
            return cast(Node, await self._call("get node", self._core.read_node, name))
        except NotFound:
            return None

    async def create_node(self, node: Node) -> Node:
        return cast(Node, await self._call("create node", self._core.create_node, node))

    async def delete_node(self, name: str) -> None:
        await self._call("delete node", self._core.delete_node, name)

    # namespaces and quotas ---------------------------------------------------

    async def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        await self._call("create namespace", self._core.create_namespace, body)

    async def create_resource_quota(self, namespace: str, quota: ResourceQuota) -> ResourceQuota:
        return cast(ResourceQuota, await self._call(
            "create resourcequota", self._core.create_namespaced_resource_quota, namespace, quota))

    # events ----------------------------------------------------------------

    async def create_event(self, namespace: str, event: Event) -> Event:
        return cast(Event, await self._call("create event", self._core.create_namespaced_event, namespace,
                                            event))

    async def patch_event(self, namespace: str, name: str, merge_patch: dict[str, Any]) -> Event:
        """Merge-patch one event (a repeat raising ``count`` and ``lastTimestamp``); 404 -> NotFound."""
        return cast(Event, await self._call("patch event", self._core.patch_namespaced_event, name, namespace,
                                            merge_patch, _content_type=MERGE_PATCH))

    async def list_events(
        self, namespace: str | None = None, *, field_selector: str | None = None
    ) -> tuple[list[Event], str]:
        """One namespace's events, or all namespaces' (None); items and the list's resourceVersion."""
        kw = selector_kwargs(field_selector, None)
        if namespace is None:
            body = await self._call("list events", self._core.list_event_for_all_namespaces, **kw)
        else:
            body = await self._call("list events", self._core.list_namespaced_event, namespace, **kw)
        return cast(list[Event], body.get("items") or []), str(body["metadata"].get("resourceVersion", ""))

    def watch_events(
        self, resource_version: str, *, namespace: str, field_selector: str | None = None,
        timeout_seconds: int = WATCH_TIMEOUT_S,
    ) -> AsyncIterator[WatchEvent]:
        """One namespace's events from ``resource_version``."""
        method = functools.partial(self._watch_core.list_namespaced_event, namespace)
        return self._watch("watch events", method, resource_version, timeout_seconds,
                           selector_kwargs(field_selector, None))
