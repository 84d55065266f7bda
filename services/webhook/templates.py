"""DRA mode's one write: the ResourceClaimTemplates admitted pods name, created when missing.

The admission core says which templates a pod needs (:mod:`services.webhook.claims`); this edge
makes sure each exists before the webhook answers, so the resourceclaim controller finds it when
the pod arrives. The webhook's RBAC is ``create`` and ``get`` on ``resourceclaimtemplates``, no
more: it never changes or deletes one (a template of the same name with another spec, made by
someone else, is refused rather than used). Templates once ensured are remembered for a while,
so a Deployment's pods cost one write, not one per pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from services.webhook.claims import SHAPE_ANNOTATION, ClaimTemplate
from shared.kube_errors import Conflict, KubeError

log = logging.getLogger(__name__)

RESOURCE_API = "/apis/resource.k8s.io/v1"


class TemplateFailed(Exception):
    """A template the pod needs could not be made or is not ours; the pod is refused with this."""


class RequestApi(Protocol):
    """The one call this needs of :class:`shared.kube.KubeClient`."""

    async def request(self, what: str, method: str, path: str, body: object = None,
                      content_type: str = ...) -> object: ...


class TemplateWriter:
    """Creates missing templates; remembers those it saw for ``ttl_s`` (a deleted one is made again
    after that)."""

    def __init__(self, kube: RequestApi | None, *, ttl_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.ttl_s, self.clock = kube, ttl_s, clock
        self._seen: dict[tuple[str, str, str], float] = {}

    async def ensure(self, templates: Iterable[ClaimTemplate]) -> int:
        """Make sure each exists with our spec; how many were created. Raises :class:`TemplateFailed`."""
        created = 0
        for t in templates:
            key = (t.namespace, t.name, t.digest)
            if self.clock() - self._seen.get(key, float("-inf")) < self.ttl_s:
                continue
            created += await self._ensure_one(t)
            self._seen[key] = self.clock()
        return created

    async def _ensure_one(self, t: ClaimTemplate) -> int:
        if self.kube is None:
            raise TemplateFailed("gpubus webhook: DRA mode needs the Kubernetes API (--in-cluster or "
                                 "--kubeconfig) to create ResourceClaimTemplates")
        where = f"{RESOURCE_API}/namespaces/{t.namespace}/resourceclaimtemplates"
        try:
            await self.kube.request(f"create resourceclaimtemplate {t.namespace}/{t.name}", "POST", where,
                                    t.body)
        except Conflict:
            await self._check_existing(t, f"{where}/{t.name}")
            return 0
        except KubeError as e:
            raise TemplateFailed(f"gpubus webhook could not create ResourceClaimTemplate "
                                 f"{t.namespace}/{t.name}: {e}") from e
        log.info("created ResourceClaimTemplate %s/%s", t.namespace, t.name)
        return 1

    async def _check_existing(self, t: ClaimTemplate, path: str) -> None:
        try:
            found = await self.kube.request(  # type: ignore[union-attr]
                f"get resourceclaimtemplate {t.namespace}/{t.name}", "GET", path)
        except KubeError as e:
            raise TemplateFailed(f"gpubus webhook could not read ResourceClaimTemplate "
                                 f"{t.namespace}/{t.name}: {e}") from e
        meta = found.get("metadata") if isinstance(found, dict) else None
        digest = ((meta or {}).get("annotations") or {}).get(SHAPE_ANNOTATION)
        if digest != t.digest:
            raise TemplateFailed(f"ResourceClaimTemplate {t.namespace}/{t.name} exists and is not the one "
                                 "gpubus would make for this request (rename or delete it)")
