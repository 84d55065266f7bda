"""What the simulated API server does to objects besides storing them (pure; no I/O).

Defaulting before admission (``schedulerName``, ``restartPolicy``...), system fields after it
(name from ``generateName``, uid, creationTimestamp, phase Pending), name rules (the types of what
is written are checked in ``shapes``), the Binding rules of ``BindingREST.setPodNodeAndMetadata``,
the status-subresource split (a main update keeps the old status, a status update keeps everything
but status), and ResourceQuota usage. Quota ``status.used`` is computed when read, from the live
(not Succeeded/Failed) pods of the namespace, for the resources named in ``spec.hard``; pod creation
is refused with 403 ``exceeded quota`` when a pod would push a quota past ``hard`` (the
ResourceQuota admission plugin).
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from gpubus_local.sim import rfc3339
from gpubus_local.sim.errors import ApiError

Obj = dict[str, Any]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: Per resource: the name's pattern (always ``fullmatch``: ``$`` would let a trailing newline in),
#: its length limit and the real server's words for it. Namespaces are labels, the rest subdomains.
_NAME_RULES: dict[str, tuple[re.Pattern[str], int, str]] = {
    "namespaces": (re.compile(_LABEL), 63, "a lowercase RFC 1123 label must consist of lower case "
                   "alphanumeric characters or '-', and must start and end with an alphanumeric character "
                   f"(regex used for validation is '{_LABEL}')"),
}
_SUBDOMAIN_RULE = (re.compile(rf"{_LABEL}(\.{_LABEL})*"), 253, "a lowercase RFC 1123 subdomain must consist "
                   "of lower case alphanumeric characters, '-' or '.', and must start and end with an "
                   f"alphanumeric character (regex used for validation is '{_LABEL}(\\.{_LABEL})*')")
#: The alphabet of apiserver's generateName suffixes (no vowels, no confusable characters).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_TERMINAL = frozenset({"Succeeded", "Failed"})
#: The scheduler name a pod gets when it names none.
DEFAULT_SCHEDULER = "default-scheduler"
#: What defaulting fills into a pod's spec when absent, on create and (``pod_update``) on update.
POD_SPEC_DEFAULTS: dict[str, Any] = {"schedulerName": DEFAULT_SCHEDULER, "restartPolicy": "Always",
                                     "terminationGracePeriodSeconds": 30, "priority": 0}


def spec_defaults(spec: Obj) -> dict[str, Any]:
    """The defaults a pod spec lacks: missing or empty counts as unset, as for Go's zero values."""
    return {key: value for key, value in POD_SPEC_DEFAULTS.items() if spec.get(key) in (None, "")}


def now() -> str:
    """The time to the second, as the API server stamps objects (``metav1.Time``)."""
    return rfc3339.format_time(time.time_ns())


def check_name(resource: str, name: str) -> None:
    pattern, limit, rule = _NAME_RULES.get(resource, _SUBDOMAIN_RULE)
    if len(name) > limit:
        raise ApiError.invalid(resource, name, f"metadata.name: Invalid value: {name!r}: must be no more "
                               f"than {limit} characters")
    if not pattern.fullmatch(name):
        raise ApiError.invalid(resource, name, f"metadata.name: Invalid value: {name!r}: {rule}")


def default_pod(pod: Obj, namespace: str) -> Obj:
    """Shape and defaults applied before admission webhooks run (they see these values)."""
    if not isinstance(pod.get("metadata"), dict) or not isinstance(pod.get("spec"), dict):
        raise ApiError.bad_request("Pod must have metadata and spec objects")
    meta, spec = pod["metadata"], pod["spec"]
    meta["namespace"] = namespace
    spec.update(spec_defaults(spec))
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    return pod


def generate_name(prefix: str) -> str:
    return prefix[:58] + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


def finish_create(resource: str, obj: Obj, kind: str) -> Obj:
    """System fields set after admission (as ``BeforeCreate`` does): name, uid, timestamps."""
    meta = obj["metadata"]
    if not meta.get("name"):
        prefix = meta.get("generateName")
        if not prefix:
            raise ApiError.invalid(resource, "", "metadata.name: Required value: name or generateName is "
                                   "required")
        meta["name"] = generate_name(prefix)
    check_name(resource, meta["name"])
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    meta.pop("resourceVersion", None)
    meta.pop("deletionTimestamp", None)
    obj["apiVersion"], obj["kind"] = "v1", kind
    return obj


def new_pod_status(pod: Obj) -> Obj:
    return {**pod, "status": {"phase": "Pending", "qosClass": "BestEffort"}}


def bind(pod: Obj, binding: Obj) -> Obj:
    """The pod after a Binding: ``spec.nodeName`` and the Binding's annotations, in one write."""
    meta, name = pod["metadata"], pod["metadata"]["name"]
    target = binding.get("target") or {}
    node = target.get("name")
    if not node:
        raise ApiError.invalid("bindings", name, "target.name: Required value")
    want_uid = (binding.get("metadata") or {}).get("uid")
    if want_uid and want_uid != meta.get("uid"):
        raise ApiError.conflict("pods", name, f"Precondition failed: UID in precondition: {want_uid}, "
                                f"UID in object meta: {meta.get('uid')}")
    if meta.get("deletionTimestamp"):
        raise ApiError.conflict("pods", name, "pod is being deleted, cannot be assigned to a host")
    if pod["spec"].get("nodeName"):
        raise ApiError.conflict("pods", name, f"pod {name} is already assigned to node "
                                f"\"{pod['spec']['nodeName']}\"")
    if pod["spec"].get("schedulingGates"):
        raise ApiError.conflict("pods", name, "pod has non-empty .spec.schedulingGates")
    annotations = {**(meta.get("annotations") or {}), **((binding.get("metadata") or {}).get("annotations")
                                                          or {})}
    return {
        **pod,
        "metadata": {**meta, "annotations": annotations},
        "spec": {**pod["spec"], "nodeName": node},
        "status": _with_scheduled(pod.get("status") or {}),
    }


def _with_scheduled(status: Obj) -> Obj:
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now()})
    return {**status, "conditions": conditions}


def keep_status(new: Obj, old: Obj) -> Obj:
    """A main-resource update cannot change status (the status subresource owns it)."""
    return {**new, "status": old.get("status", {})}


def only_status(new: Obj, old: Obj) -> Obj:
    """A status-subresource update changes status and nothing else."""
    return {**old, "status": new.get("status", {})}


# --------------------------------------------------------------------------- quantities and quota

_SUFFIXES = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("0.001"), "k": Decimal(10**3),
    "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
    "E": Decimal(10**18), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30),
    "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}
#: Kubernetes' quantity grammar: a decimal number, then a suffix or a decimal exponent (``1e3``).
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]{1,3})|([a-zA-Z]*))")


def parse_quantity(text: Any) -> Decimal:
    m = _QUANTITY.fullmatch(str(text).strip())
    if not m or (m.group(3) or "") not in _SUFFIXES:
        raise ApiError.bad_request(f"quantities must match the regular expression: {text!r}")
    try:
        number = Decimal(m.group(1))
        if m.group(2) is not None:  # Decimal keeps the exponent apart: no huge integer is ever built
            return number.scaleb(int(m.group(2)))
        return number * _SUFFIXES[m.group(3) or ""]
    except InvalidOperation as e:
        raise ApiError.bad_request(f"invalid quantity {text!r}") from e


def format_quantity(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


def pod_usage(pod: Obj) -> dict[str, Decimal]:
    """Requests of a pod as quota counts them: ``requests.X`` and bare ``X`` (limits stand in)."""
    usage: dict[str, Decimal] = {}
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, quantity in amounts.items():
            value = parse_quantity(quantity)
            for key in (name, f"requests.{name}"):
                usage[key] = usage.get(key, Decimal(0)) + value
        for name, quantity in (resources.get("limits") or {}).items():
            usage[f"limits.{name}"] = usage.get(f"limits.{name}", Decimal(0)) + parse_quantity(quantity)
    usage["pods"] = Decimal(1)
    return usage


def quota_used(quota: Obj, pods: list[Obj]) -> dict[str, Decimal]:
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = dict.fromkeys(hard, Decimal(0))
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue
        for key, value in pod_usage(pod).items():
            if key in used:
                used[key] += value
    return used


def with_quota_status(quota: Obj, pods: list[Obj]) -> Obj:
    hard = (quota.get("spec") or {}).get("hard") or {}
    used = {k: format_quantity(v) for k, v in quota_used(quota, pods).items()}
    return {**quota, "status": {"hard": dict(hard), "used": used}}


def check_quotas(pod: Obj, quotas: list[Obj], pods: list[Obj]) -> None:
    """403 ``exceeded quota`` when admitting ``pod`` would exceed any quota's ``hard``."""
    wanted = pod_usage(pod)
    for quota in quotas:
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = quota_used(quota, pods)
        for key, limit in hard.items():
            if key in wanted and used[key] + wanted[key] > parse_quantity(limit):
                name = quota["metadata"]["name"]
                raise ApiError.forbidden(
                    f'pods "{pod["metadata"].get("name") or pod["metadata"].get("generateName", "")}" is '
                    f"forbidden: exceeded quota: {name}, requested: {key}={format_quantity(wanted[key])}, "
                    f"used: {key}={format_quantity(used[key])}, limited: {key}={limit}")
