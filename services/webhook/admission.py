"""The admission core: one AdmissionReview request in, one decision out, no I/O.

HAMi's rules in HAMi's order (``pkg/scheduler/webhook.go`` Handle, reference/hami-contract.md §5):
no containers -> denied; another scheduler -> allowed unchanged; per container (init first) the
percentage check, ``CUDA_TASK_PRIORITY``, the core policy env, the implied card count, exclusive
``gpucores: 100`` for whole-card requests, runtimeClassName, ``NVIDIA_VISIBLE_DEVICES=none``;
privileged -> denied; schedulerName / nodeName; namespace quota. gpubus adds the
``hami.io/webhook=ignore`` pod label, the limiter tamper check (contract item 7) and a denial
naming the container and resource for invalid quantities.

In DRA mode (``AdmissionSettings.claims``) a GPU pod keeps its scheduler and, last, each GPU
container's limits become a claim (:mod:`services.webhook.claims`); the decision lists the
claim templates the pod names, for the edge to create.

The mutations are made on a copy of the pod and the JSONPatch is the diff of the two, so
running :func:`admit` on its own output yields no patch (``reinvocationPolicy: IfNeeded``).
This module must not import aiohttp, nats or a Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from services.webhook import claims, jsonpatch, limiter
from services.webhook.errors import MalformedPod
from services.webhook.quota import NO_QUOTA, QuotaView, exceeded, pod_demand
from services.webhook.reviews import AdmissionRequest, PatchOp
from shared.errors import RequestError
from shared.model import ContainerRequest, PodRequest
from shared.requests import DEFAULT_NAMES, ResourceNames, checked_quantity, parse_quantity, pod_request

DEFAULT_SCHEDULER = "default-scheduler"
IGNORE_LABEL = "hami.io/webhook"
IGNORE_VALUE = "ignore"
TASK_PRIORITY_ENV = "CUDA_TASK_PRIORITY"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
#: Container lists in slot order: HAMi walks init containers first.
CONTAINER_KEYS = ("initContainers", "containers")
QUOTA_UNKNOWN_WARNING = (
    "gpubus could not read the namespace's ResourceQuotas; GPU quota is checked at scheduling"
)


class GpuCorePolicy(StrEnum):
    """HAMi ``gpuCorePolicy``: anything but ``default`` is injected as ``GPU_CORE_UTILIZATION_POLICY``."""

    DEFAULT = "default"
    FORCE = "force"
    DISABLE = "disable"


class Outcome(StrEnum):
    """Why the decision came out as it did (logged, and the ``reason`` of a denial's status)."""

    ADMITTED = "Admitted"
    NOT_OURS = "NotOurs"
    IGNORED = "Ignored"
    OTHER_SCHEDULER = "OtherScheduler"
    NO_CONTAINERS = "NoContainers"
    INVALID_QUANTITY = "InvalidQuantity"
    PRIVILEGED = "Privileged"
    LIMITER_TAMPERING = "LimiterTampering"
    NODE_ASSIGNED = "NodeAssigned"
    QUOTA_EXCEEDED = "QuotaExceeded"
    MALFORMED_POD = "MalformedPod"
    NOT_TRANSLATABLE = "NotTranslatable"
    CLAIM_TEMPLATE_FAILED = "ClaimTemplateFailed"


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionSettings:
    """What admission depends on (the webhook's settings, minus anything about serving)."""

    names: ResourceNames = DEFAULT_NAMES
    """Resource names, defaults (memory, cores, card count) and memoryFactor."""
    scheduler_name: str = "gpubus-scheduler"
    """Written to GPU pods' ``spec.schedulerName``; empty leaves it alone (HAMi ``--scheduler-name``)."""
    force_overwrite_default_scheduler: bool = True
    """Also take pods that name ``default-scheduler`` (HAMi ``forceOverwriteDefaultScheduler``)."""
    gpu_core_policy: GpuCorePolicy = GpuCorePolicy.DEFAULT
    overwrite_env: bool = False
    """Containers without a GPU get ``NVIDIA_VISIBLE_DEVICES=none`` (HAMi ``overwriteEnv``)."""
    runtime_class_name: str = ""
    """Set on GPU pods that name no runtimeClassName; empty = leave it."""
    allow_limiter_env_namespaces: frozenset[str] = frozenset()
    """Namespaces whose pods may set the limiter's env vars themselves."""
    preload_markers: tuple[str, ...] = limiter.DEFAULT_PRELOAD_MARKERS
    """Library name prefixes a container may not ``LD_PRELOAD`` (they sit in front of the limiter)."""
    claims: claims.ClaimSettings | None = None
    """DRA mode: GPU limits become ResourceClaims (:mod:`services.webhook.claims`) and the pod keeps
    its scheduler (kube-scheduler allocates claims). None: extender mode (HAMi's)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionDecision:
    """The answer for one review, plus what the ``pod.admitted``/``pod.rejected`` event needs."""

    allowed: bool
    outcome: Outcome
    patch: tuple[PatchOp, ...] = ()
    message: str = ""
    code: int = 200
    """HTTP-style code of the status: 403 denied, 400 invalid input."""
    warnings: tuple[str, ...] = ()
    gpu: bool = False
    """The pod asks for a GPU (it is gpubus's)."""
    requests: tuple[ContainerRequest | None, ...] = ()
    """Per container, init first, derived from the mutated pod; None for a container without GPU."""
    scheduler_name: str = ""
    templates: tuple[claims.ClaimTemplate, ...] = ()
    """DRA mode: the ResourceClaimTemplates the patched pod names; the edge creates those missing
    before it answers (none on a dry run)."""

    @property
    def mutations(self) -> tuple[str, ...]:
        return tuple(op["path"] for op in self.patch)


def admit(
    review: AdmissionRequest, settings: AdmissionSettings, quotas: QuotaView = NO_QUOTA
) -> AdmissionDecision:
    """Decide one review. Never raises for anything inside the pod: that becomes a denial."""
    pod, kind = review.get("object"), review.get("kind")
    is_pod = not isinstance(kind, dict) or kind.get("kind", "Pod") == "Pod"
    if review.get("operation") != "CREATE" or not is_pod or not isinstance(pod, dict):
        return AdmissionDecision(allowed=True, outcome=Outcome.NOT_OURS)
    try:
        return _admit_pod(pod, str(review.get("namespace") or ""), settings, quotas)
    except MalformedPod as e:
        return _deny(Outcome.MALFORMED_POD, str(e), code=400)


def _admit_pod(
    pod: Mapping[str, object], namespace: str, s: AdmissionSettings, quotas: QuotaView
) -> AdmissionDecision:
    meta, spec = _map(pod.get("metadata"), "metadata"), _map(pod.get("spec"), "spec")
    if _map(meta.get("labels"), "metadata.labels").get(IGNORE_LABEL) == IGNORE_VALUE:
        return AdmissionDecision(
            allowed=True, outcome=Outcome.IGNORED, message=f"{IGNORE_LABEL}={IGNORE_VALUE}"
        )
    if not _list(spec.get("containers"), "spec.containers"):
        return _deny(Outcome.NO_CONTAINERS, "pod has no containers")
    if _other_scheduler(spec, s):
        return AdmissionDecision(
            allowed=True,
            outcome=Outcome.OTHER_SCHEDULER,
            message="pod already has different scheduler assigned",
        )
    new_spec = _copy_spec(spec)
    gpu = _mutate_containers(new_spec, s)
    if isinstance(gpu, AdmissionDecision):
        return gpu
    if gpu:
        denial = _gpu_pod_denial(spec, namespace, s)
        if denial:
            return denial
        if s.claims is not None:
            if spec.get("nodeName"):
                return _deny(Outcome.NODE_ASSIGNED, "pod has node assigned: kube-scheduler would never "
                             "allocate its GPU claim")
        elif s.scheduler_name:
            # HAMi only refuses a preset node when it reroutes the pod to its own scheduler.
            new_spec["schedulerName"] = s.scheduler_name
            if spec.get("nodeName"):
                return _deny(Outcome.NODE_ASSIGNED, "pod has node assigned")
    try:
        request = pod_request({**pod, "spec": new_spec}, s.names)
    except RequestError as e:
        return _deny(Outcome.INVALID_QUANTITY, str(e), code=400)
    if gpu and not quotas.unknown:
        over = exceeded(quotas, pod_demand(request.containers), s.names)
        if over is not None:
            why = f"ResourceQuota {over.quota}: limits.{over.resource} is {over.hard}"
            return _deny(Outcome.QUOTA_EXCEEDED, "exceeding resource quota", warnings=(why,))
    templates: tuple[claims.ClaimTemplate, ...] = ()
    if gpu and s.claims is not None:
        try:
            templates = _translate(new_spec, request, namespace or request.namespace, s.names, s.claims)
        except claims.Untranslatable as e:
            return _deny(Outcome.NOT_TRANSLATABLE, f"DRA mode: {e}", code=400)
    return AdmissionDecision(
        allowed=True,
        outcome=Outcome.ADMITTED,
        gpu=gpu,
        warnings=(QUOTA_UNKNOWN_WARNING,) if gpu and quotas.unknown else (),
        patch=tuple(jsonpatch.diff(spec, new_spec, "/spec")),
        requests=tuple(c.request for c in request.containers),
        scheduler_name=str(new_spec.get("schedulerName") or ""),
        templates=templates,
    )


def _translate(new_spec: dict[str, object], request: PodRequest, namespace: str, names: ResourceNames,
               settings: claims.ClaimSettings) -> tuple[claims.ClaimTemplate, ...]:
    """DRA mode: each GPU container (slot order, as ``request``) to a claim of its shape."""
    slots = [c for key in CONTAINER_KEYS for c in _list(new_spec.get(key), f"spec.{key}")]
    shaped = [(c, claims.shape(r.request, request.annotations, settings.driver))
              for c, r in zip(slots, request.containers, strict=True) if r.request is not None]
    return claims.claim_pod(new_spec, shaped, names, namespace, settings)


def template_failure(message: str) -> AdmissionDecision:
    """The pod refused because a claim template it needs could not be made (the edge's call)."""
    return _deny(Outcome.CLAIM_TEMPLATE_FAILED, message, code=500)


def _mutate_containers(new_spec: dict[str, object], s: AdmissionSettings) -> bool | AdmissionDecision:
    """HAMi step 3 over init containers, then containers; whether any asks for a GPU, or a denial."""
    gpu = False
    for key in CONTAINER_KEYS:
        for container in _list(new_spec.get(key), f"spec.{key}"):
            denial = _percentage_denial(container, s.names) or _cores_denial(container, s.names)
            if denial:
                return _deny(Outcome.INVALID_QUANTITY, denial, code=400)
            try:
                gpu = _mutate_container(container, new_spec, s) or gpu
            except RequestError as e:
                return _deny(Outcome.INVALID_QUANTITY, str(e), code=400)
    return gpu


def _other_scheduler(spec: Mapping[str, object], s: AdmissionSettings) -> bool:
    """HAMi step 2: the pod names a scheduler that is neither ours nor an overridable default."""
    name = spec.get("schedulerName") or ""
    if not name:
        return False
    overridable = name == DEFAULT_SCHEDULER and s.force_overwrite_default_scheduler
    return not overridable and (not s.scheduler_name or name != s.scheduler_name)


def _percentage_denial(container: Mapping[str, object], names: ResourceNames) -> str | None:
    raw = _resource(container, names.memory_percentage)
    if raw is None:
        return None
    try:
        pct = parse_quantity(raw)
    except ValueError:
        return None  # not an integer: request derivation names it as an invalid quantity
    if 0 <= pct <= 100:
        return None
    return (
        f"invalid {names.memory_percentage} value {pct} in container {container.get('name', '')}: "
        f"must be an integer between 0 and 100"
    )


def _cores_denial(container: Mapping[str, object], names: ResourceNames) -> str | None:
    """Cores are % of one card's SMs: above 100 is refused here (HAMi's Fit would clamp it silently)."""
    raw = _resource(container, names.cores) if names.cores else None
    if raw is None:
        return None
    try:
        cores = parse_quantity(raw)
    except ValueError:
        return None  # not an integer: request derivation names it as an invalid quantity
    if 0 <= cores <= 100:
        return None
    return (
        f"invalid {names.cores} value {cores} in container {container.get('name', '')}: "
        f"must be an integer between 0 and 100 (% of one card's compute)"
    )


def _mutate_container(c: dict[str, object], spec: dict[str, object], s: AdmissionSettings) -> bool:
    """HAMi MutateAdmission for one container (on the copy); True when it asks for a GPU."""
    names, cname = s.names, str(c.get("name", ""))
    priority = _map(_map(c.get("resources"), "resources").get("limits"), "resources.limits").get(
        names.priority
    )
    if priority is not None:
        # Range-checked like the other GPU resources: HAMi-core reads it into a C int.
        _set_env(c, TASK_PRIORITY_ENV, str(checked_quantity(cname, names.priority, priority)))
    if s.gpu_core_policy != GpuCorePolicy.DEFAULT:
        _set_env(c, limiter.CORE_POLICY_ENV, s.gpu_core_policy.value)
    gpu = _add_implied_count(c, names)
    gpu = _add_exclusive_cores(c, names) or gpu
    if gpu and s.runtime_class_name and not spec.get("runtimeClassName"):
        spec["runtimeClassName"] = s.runtime_class_name
    if not gpu and s.overwrite_env:
        _set_env(c, VISIBLE_DEVICES_ENV, "none")
    return gpu


def _add_implied_count(c: dict[str, object], names: ResourceNames) -> bool:
    """Memory, percentage or cores without a count imply ``default_gpu_num`` cards."""
    if _resource(c, names.count) is not None:
        return True
    if all(_resource(c, r) is None for r in (names.cores, names.memory, names.memory_percentage)):
        return False
    if names.default_gpu_num <= 0:
        return False
    _limits(c)[names.count] = str(names.default_gpu_num)
    return True


def _add_exclusive_cores(c: dict[str, object], names: ResourceNames) -> bool:
    """A whole-card request without cores becomes exclusive: ``gpucores: 100`` (HAMi >= v2.7)."""
    if not names.count or _resource(c, names.count) is None:
        return False
    if not names.cores or _resource(c, names.cores) is not None:
        return False
    pct = _resource(c, names.memory_percentage)
    if pct is not None:
        try:
            whole = parse_quantity(pct) == 100
        except ValueError:
            whole = False
    else:
        whole = not names.memory or _resource(c, names.memory) is None
    if whole:
        _limits(c)[names.cores] = "100"
    return whole


def _gpu_pod_denial(
    spec: Mapping[str, object], namespace: str, s: AdmissionSettings
) -> AdmissionDecision | None:
    """HAMi step 4 (privileged) and gpubus's limiter tamper check, on the pod as submitted."""
    containers = [c for key in CONTAINER_KEYS for c in _list(spec.get(key), f"spec.{key}")]
    for c in containers:
        if _map(c.get("securityContext"), "securityContext").get("privileged") is True:
            return _deny(Outcome.PRIVILEGED, f"container {c.get('name', '')} is privileged")
    if namespace in s.allow_limiter_env_namespaces:
        return None
    for c in containers:
        why = limiter.tampering(
            c,
            name=str(c.get("name", "")),
            core_policy=s.gpu_core_policy.value,
            preload_markers=s.preload_markers,
        )
        if why:
            return _deny(Outcome.LIMITER_TAMPERING, f"{why}; only allow-listed namespaces may set it")
    return None


def _deny(
    outcome: Outcome, message: str, *, code: int = 403, warnings: tuple[str, ...] = ()
) -> AdmissionDecision:
    return AdmissionDecision(allowed=False, outcome=outcome, message=message, code=code, warnings=warnings)


def _set_env(c: dict[str, object], name: str, value: str) -> None:
    """Set ``name`` (the last entry wins, as in Kubernetes); no change when it already holds ``value``."""
    env = _list(c.get("env"), "env")
    wanted: dict[str, object] = {"name": name, "value": value}
    for i in range(len(env) - 1, -1, -1):
        if env[i].get("name") == name:
            if env[i] != wanted:
                env[i] = wanted
            return
    env.append(wanted)
    c["env"] = env


def _limits(c: dict[str, object]) -> dict[str, object]:
    resources = _map(c.get("resources"), "resources")
    c["resources"] = resources
    limits = _map(resources.get("limits"), "resources.limits")
    resources["limits"] = limits
    return limits


def _resource(c: Mapping[str, object], name: str) -> object | None:
    """A quantity from limits, else requests (HAMi ``resourceValue``); None when absent."""
    if not name:
        return None
    resources = _map(c.get("resources"), "resources")
    limit = _map(resources.get("limits"), "resources.limits").get(name)
    return limit if limit is not None else _map(resources.get("requests"), "resources.requests").get(name)


def _copy_spec(spec: Mapping[str, object]) -> dict[str, object]:
    """A copy deep enough to mutate containers' env and limits without touching the original."""
    new = dict(spec)
    for key in CONTAINER_KEYS:
        if key in spec:
            new[key] = [_copy_container(c) for c in _list(spec[key], f"spec.{key}")]
    return new


def _copy_container(c: Mapping[str, object]) -> dict[str, object]:
    new = dict(c)
    if "env" in c:
        new["env"] = list(_list(c["env"], "env"))
    if "resources" in c:
        resources = dict(_map(c["resources"], "resources"))
        if "limits" in resources:
            resources["limits"] = dict(_map(resources["limits"], "resources.limits"))
        new["resources"] = resources
    return new


def _map(value: object, where: str) -> dict[str, object]:
    """A JSON object (None reads as empty); anything else is a malformed pod."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPod(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: object, where: str) -> list[dict[str, object]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise MalformedPod(f"{where}: expected a list of objects")
    return value
