"""DRA mode's admission: a pod's ``nvidia.com/gpu``/``gpumem``/``gpucores`` limits become claims.

So pod specs written for HAMi (and for gpubus's extender mode) run unchanged where gpubus is a DRA
driver, as HAMi-DRA's webhook does for HAMi. Each GPU container gets its own claim (its own share
of each card, as the device plugin gives it), made by the resourceclaim controller from a
ResourceClaimTemplate the pod names in ``spec.resourceClaims``; the container names that claim in
``resources.claims`` and loses the extended-resource limits it replaced, so it no longer asks the
device plugin. A template is per namespace (a pod may only name one of its own) and per request
shape, named after the shape (``gpubus-1x3000mi-30c``), so pods of one shape share one template;
the webhook's edge creates the missing ones (:mod:`services.webhook.templates`).

Why templates and not claims: a pod has neither name (``generateName``) nor UID at admission, so a
claim made here could not be owned by it and would outlive it; a template's claim is the pod's and
goes with it.

Pure: the mutated pod spec (a dict the admission core owns) in, the templates it needs out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared import annotations as ann
from shared.model import PERCENT_UNSET, ContainerRequest
from shared.requests import ResourceNames

Json = dict[str, Any]
MANAGED_BY = "gpubus-webhook"
SHAPE_ANNOTATION = "gpubus.io/claim-shape"
"""On each template the webhook makes: the digest of its spec, so a template of that name that
someone else made (with another spec) is recognised instead of used."""
REQUEST = "gpu"
_TYPE_TOKEN = re.compile(r"[A-Za-z0-9.]+")
_UUID = re.compile(r"[A-Za-z0-9-]+")


class Untranslatable(ValueError):
    """A GPU request DRA cannot express (the pod is refused, saying which and why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimSettings:
    """Where DRA mode's claims point."""

    device_class: str = "gpubus.io"
    """The DeviceClass of gpubus's GPUs (the chart's ``dra.deviceClassName``)."""
    driver: str = "gpubus.io"
    """The driver name: the domain of the device attributes selectors read (``uuid``, ``productName``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimShape:
    """One container's request in DRA terms: cards, MiB of each (0: the whole card), % of its SMs."""

    count: int
    memory_mib: int
    cores: int
    selectors: tuple[str, ...] = ()

    @property
    def template_name(self) -> str:
        memory = f"{self.memory_mib}mi" if self.memory_mib else "whole"
        name = f"gpubus-{self.count}x{memory}-{self.cores}c"
        if self.selectors:
            name += "-" + hashlib.sha256("\n".join(self.selectors).encode()).hexdigest()[:10]
        return name


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimTemplate:
    """A ResourceClaimTemplate the pod needs in its namespace, as it is to be created."""

    namespace: str
    name: str
    body: Json

    @property
    def digest(self) -> str:
        return str(self.body["metadata"]["annotations"][SHAPE_ANNOTATION])


def shape(request: ContainerRequest, annotations: Mapping[str, str], driver: str) -> ClaimShape:
    """HAMi's derived request (:func:`shared.requests.container_request`) as a claim's shape."""
    if request.memreq <= 0 and request.mempercentagereq not in (100, PERCENT_UNSET):
        raise Untranslatable(
            f"{request.mempercentagereq} % of each card's memory has no DRA equivalent (claims ask for"
            " bytes): ask for nvidia.com/gpumem in MiB instead")
    return ClaimShape(count=request.nums, memory_mib=max(request.memreq, 0), cores=request.coresreq,
                      selectors=selectors(annotations, driver))


def selectors(annotations: Mapping[str, str], driver: str) -> tuple[str, ...]:
    """HAMi's card annotations as CEL selectors over the slice's attributes. Types match on whole
    tokens, case-insensitively (``A10`` is ``NVIDIA-A10``, never ``NVIDIA-A100``), as in extender mode."""
    attrs = f'device.attributes["{driver}"]'
    out = []
    for key, negate in ((ann.USE_GPUTYPE, False), (ann.NOUSE_GPUTYPE, True)):
        if types := _items(annotations.get(key, "")):
            test = " || ".join(f'{attrs}.productName.matches("{_type_regex(t, key)}")' for t in types)
            out.append(f"!({test})" if negate else test)
    for key, negate in ((ann.USE_GPUUUID, False), (ann.NOUSE_GPUUUID, True)):
        if uuids := _items(annotations.get(key, "")):
            for u in uuids:
                if not _UUID.fullmatch(u):
                    raise Untranslatable(f"annotation {key}: {u[:64]!r} is not a GPU UUID")
            test = f"{attrs}.uuid in {json.dumps(uuids)}"
            out.append(f"!({test})" if negate else test)
    return tuple(out)


def _items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _type_regex(entry: str, key: str) -> str:
    """RE2 for a whole-token, case-insensitive match; no backslashes (nothing to escape twice)."""
    tokens = [t for t in re.split(r"[-\s_]+", entry) if t]
    if not tokens or not all(_TYPE_TOKEN.fullmatch(t) for t in tokens):
        raise Untranslatable(f"annotation {key}: {entry[:64]!r} is not a GPU type"
                             " (letters, digits, '.', '-')")
    body = "[-_ ]+".join(t.replace(".", "[.]") for t in tokens)
    return f"(?i)(^|[-_ ]){body}([-_ ]|$)"


def template(s: ClaimShape, namespace: str, settings: ClaimSettings) -> ClaimTemplate:
    """The namespace's template of this shape; several cards are kept apart (a shareable device could
    otherwise serve one request twice)."""
    capacity: Json = {"cores": str(s.cores)}
    if s.memory_mib:
        capacity["memory"] = f"{s.memory_mib}Mi"  # none: the slice's default, the whole card
    exactly: Json = {"deviceClassName": settings.device_class, "allocationMode": "ExactCount",
                     "count": s.count, "capacity": {"requests": capacity}}
    if s.selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in s.selectors]
    devices: Json = {"requests": [{"name": REQUEST, "exactly": exactly}]}
    if s.count > 1:
        devices["constraints"] = [{"requests": [REQUEST], "distinctAttribute": f"{settings.driver}/uuid"}]
    spec = {"spec": {"devices": devices}}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    body = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": s.template_name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
                     "annotations": {SHAPE_ANNOTATION: digest}},
        "spec": spec,
    }
    return ClaimTemplate(namespace=namespace, name=s.template_name, body=body)


def claim_pod(spec: dict[str, object], containers: list[tuple[dict[str, object], ClaimShape]],
              names: ResourceNames, namespace: str, settings: ClaimSettings) -> tuple[ClaimTemplate, ...]:
    """Mutate ``spec`` (the admission core's copy): each GPU container names a claim of its shape
    instead of the extended resources; the pod's ``resourceClaims`` gain one per container."""
    claims = list(spec.get("resourceClaims") or [])  # type: ignore[call-overload]
    taken = {str(c.get("name")) for c in claims if isinstance(c, dict)}
    templates: dict[str, ClaimTemplate] = {}
    for i, (container, s) in enumerate(containers):
        name = _free_name(f"gpubus-{i}", taken)
        tpl = templates.setdefault(s.template_name, template(s, namespace, settings))
        claims.append({"name": name, "resourceClaimTemplateName": tpl.name})
        _drop_gpu_resources(container, names)
        resources = container.setdefault("resources", {})
        assert isinstance(resources, dict)
        resources["claims"] = [*(resources.get("claims") or []), {"name": name}]
    spec["resourceClaims"] = claims
    return tuple(templates.values())


def _free_name(wanted: str, taken: set[str]) -> str:
    name, n = wanted, 0
    while name in taken:
        n += 1
        name = f"{wanted}-{n}"
    taken.add(name)
    return name


def _drop_gpu_resources(container: dict[str, object], names: ResourceNames) -> None:
    """The limits the claim replaces (priority too: it is already CUDA_TASK_PRIORITY, and no node
    advertises it in DRA mode, so kube-scheduler would find no node for it)."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return
    gone = {names.count, names.memory, names.memory_percentage, names.cores, names.priority} - {""}
    for key in ("limits", "requests"):
        section = resources.get(key)
        if isinstance(section, dict):
            kept = {k: v for k, v in section.items() if k not in gone}
            if kept:
                resources[key] = kept
            else:
                del resources[key]
