"""Builders shared by the admission tests (no tests here): pods, reviews, an RFC 6902 applier."""

from __future__ import annotations

import copy
from typing import Any

from services.webhook.admission import AdmissionDecision, AdmissionSettings, admit
from services.webhook.quota import NO_QUOTA, QuotaView
from services.webhook.reviews import AdmissionRequest, PatchOp


def container(
    name: str = "main",
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    env: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "cuda:12", **extra}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if resources:
        c["resources"] = resources
    if env is not None:
        c["env"] = env
    return c


def pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init is not None:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": body}


def request(obj: dict[str, Any], namespace: str = "ns", operation: str = "CREATE") -> AdmissionRequest:
    return {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": namespace,
        "operation": operation,  # type: ignore[typeddict-item]
        "object": obj,
    }


def run(
    obj: dict[str, Any], settings: AdmissionSettings | None = None, quotas: QuotaView = NO_QUOTA, **kw: Any
) -> AdmissionDecision:
    return admit(request(obj, **kw), settings or AdmissionSettings(), quotas)


def apply_patch(doc: Any, ops: tuple[PatchOp, ...] | list[PatchOp]) -> Any:
    """A strict RFC 6902 applier (add/remove/replace): a bad path raises instead of guessing."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                assert index <= len(parent), op
                parent.insert(index, copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                parent[index] = copy.deepcopy(op["value"])
            else:
                del parent[index]
        elif op["op"] == "add":
            parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            assert last in parent, op
            parent[last] = copy.deepcopy(op["value"])
        else:
            del parent[last]
    return doc


def mutated(obj: dict[str, Any], settings: AdmissionSettings | None = None, **kw: Any) -> dict[str, Any]:
    decision = run(obj, settings, **kw)
    assert decision.allowed, decision.message
    result: dict[str, Any] = apply_patch(obj, decision.patch)
    return result


def limits_of(obj: dict[str, Any], index: int = 0, key: str = "containers") -> dict[str, Any]:
    limits: dict[str, Any] = obj["spec"][key][index].get("resources", {}).get("limits", {})
    return limits


def env_of(obj: dict[str, Any], index: int = 0, key: str = "containers") -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in obj["spec"][key][index].get("env", [])}
