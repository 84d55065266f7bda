"""Which Kubernetes API a service talks to, chosen the same way by every service.

The order, as client-go's ``BuildConfigFromFlags``: an explicit ``--kubeconfig`` file wins; else
``--in-cluster`` uses the pod's service account; else there is no API (each service says what it
does without one). A service never falls back from a configured source to another one: a
kubeconfig that does not load is an error, not a silent in-cluster attempt.

Must not know any service's settings class: it takes the two fields every one of them has.
"""

from __future__ import annotations

from typing import Protocol

from shared.kube import KubeClient


class KubeSource(Protocol):
    """The two settings fields that say where the API is (every service's settings have them)."""

    @property
    def kubeconfig(self) -> str | None: ...
    @property
    def in_cluster(self) -> bool: ...


async def kube_client(settings: KubeSource) -> KubeClient | None:
    """The client ``settings`` ask for: kubeconfig, else in-cluster, else None."""
    if settings.kubeconfig:
        return await KubeClient.from_kubeconfig(settings.kubeconfig)
    if settings.in_cluster:
        return await KubeClient.in_cluster()
    return None
