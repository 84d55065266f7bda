"""Write-time checks of what the simulated API server itself reads back from stored objects.

The server reads labels (selectors), annotations (a Binding merges into them), a pod's containers
and their ``resources`` (quota), a quota's ``spec.hard``, status conditions and container
statuses (``kubectl get``'s Table), and an event's own fields (selectors and the Table). A value
of the wrong type there, once stored, would break every later list, watch, bind or quota check
that meets it; a real server's decoder never lets one in. So each write is checked here before it
is stored, and reads trust the store: a wrong JSON type is a 400 (the decoder's ``cannot
unmarshal``), an unusable value of the right type a 422 Invalid.

A write checks only the parts (metadata, spec, status) that are not the very objects already
stored: stored objects are never mutated and were checked when written, so a status patch does not
re-check a pod's spec. ``check_depth`` refuses a body nested deeper than the serialiser can write
back inside the envelopes the server wraps objects in. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_errors import go_quote
from gpubus_local.sim.objects import parse_quantity

Obj = dict[str, Any]
Check = Callable[[str, str, Any], None]  # (kind, object name, the part)

#: orjson writes at most 254 nested containers; a stored object goes out inside at most three more
#: (a Table row's ``object.metadata``), so a body that still serialises inside this many is safe.
_ENVELOPE_DEPTH = 8
_JSON_TYPES = {str: "string", int: "number", float: "number", bool: "bool", list: "array", dict: "object"}
_META_STRINGS = ("name", "generateName", "namespace", "resourceVersion", "uid")


def check_depth(body: Any) -> None:
    """400 for a body the server could not serialise back (orjson reads 1024 levels, writes 254)."""
    wrapped = body
    for _ in range(_ENVELOPE_DEPTH):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except TypeError as e:  # orjson.JSONEncodeError
        raise ApiError.bad_request(f"the object cannot be stored: {e} (nested too deeply)") from e


def undecodable(kind: str, path: str, value: Any, go_type: str) -> ApiError:
    got = _JSON_TYPES.get(type(value), "value")
    return ApiError.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: json: cannot '
                                f"unmarshal {got} into Go struct field {kind}.{path} of type {go_type}")


def _string(kind: str, path: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise undecodable(kind, path, value, "string")


def _map(kind: str, path: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise undecodable(kind, path, value, "map")
    return value


def _maps(kind: str, path: str, value: Any) -> list[Mapping[str, Any]]:
    """A list of objects (null is an empty list)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise undecodable(kind, path, value, "array")
    for i, item in enumerate(value):
        _map(kind, f"{path}[{i}]", item)
    return value


def _string_map(kind: str, path: str, value: Any) -> None:
    for key, item in _map(kind, path, value).items():
        _string(kind, f"{path}[{key}]", item)


def _quantities(kind: str, path: str, value: Any) -> None:
    for key, quantity in _map(kind, path, value).items():
        if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
            raise undecodable(kind, f"{path}[{key}]", quantity, "resource.Quantity")
        parse_quantity(quantity)


def check_metadata(kind: str, meta: Mapping[str, Any]) -> None:
    for key in _META_STRINGS:
        _string(kind, f"metadata.{key}", meta.get(key))
    _string_map(kind, "metadata.labels", meta.get("labels"))
    _string_map(kind, "metadata.annotations", meta.get("annotations"))


def _any_spec(kind: str, _name: str, value: Any) -> None:
    _map(kind, "spec", value)


def _any_status(kind: str, _name: str, value: Any) -> None:
    _map(kind, "status", value)


def _pod_spec(kind: str, name: str, value: Any) -> None:
    spec = _map(kind, "spec", value)
    _string(kind, "spec.nodeName", spec.get("nodeName"))
    containers = _maps(kind, "spec.containers", spec.get("containers"))
    if not containers:
        raise ApiError.invalid("pods", name, "spec.containers: Required value")
    seen: set[str] = set()
    for i, container in enumerate(containers):
        at = f"spec.containers[{i}]"
        _string(kind, f"{at}.name", container.get("name"))
        _string(kind, f"{at}.image", container.get("image"))
        if not container.get("name") or not container.get("image"):
            raise ApiError.invalid("pods", name, f"{at}: name and image are required")
        if container["name"] in seen:
            raise ApiError.invalid("pods", name, f"{at}.name: Duplicate value: {container['name']!r}")
        seen.add(container["name"])
        resources = _map(kind, f"{at}.resources", container.get("resources"))
        for part in ("limits", "requests"):
            _quantities(kind, f"{at}.resources.{part}", resources.get(part))


def _quota_spec(kind: str, _name: str, value: Any) -> None:
    _quantities(kind, "spec.hard", _map(kind, "spec", value).get("hard"))


def _conditions(kind: str, path: str, value: Any) -> None:
    """Conditions are keyed by ``type`` (and nodes' readiness by ``status``) when printed."""
    for i, condition in enumerate(_maps(kind, path, value)):
        _string(kind, f"{path}[{i}].type", condition.get("type"))
        _string(kind, f"{path}[{i}].status", condition.get("status"))


def _pod_status(kind: str, _name: str, value: Any) -> None:
    status = _map(kind, "status", value)
    _string(kind, "status.phase", status.get("phase"))
    _conditions(kind, "status.conditions", status.get("conditions"))
    _maps(kind, "status.containerStatuses", status.get("containerStatuses"))


def _node_status(kind: str, _name: str, value: Any) -> None:
    status = _map(kind, "status", value)
    _conditions(kind, "status.conditions", status.get("conditions"))
    _map(kind, "status.nodeInfo", status.get("nodeInfo"))


_EVENT_STRINGS = ("reason", "message", "type", "firstTimestamp", "lastTimestamp", "eventTime",
                  "reportingComponent", "reportingInstance", "action")
_REFERENCE_STRINGS = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")


def _event_fields(kind: str, name: str, event: Obj) -> None:
    """An event's top-level fields (it has no spec or status), and the rule that it lives in the
    namespace of the object it is about (``legacyValidateEvent``; "default" also for a cluster-scoped one)."""
    for key in _EVENT_STRINGS:
        _string(kind, key, event.get(key))
    involved = _map(kind, "involvedObject", event.get("involvedObject"))
    for key in _REFERENCE_STRINGS:
        _string(kind, f"involvedObject.{key}", involved.get(key))
    _string_map(kind, "source", event.get("source"))
    count = event.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise undecodable(kind, "count", count, "int32")
    _map(kind, "series", event.get("series"))
    namespace, about = event["metadata"].get("namespace") or "", involved.get("namespace") or ""
    if (namespace != about) if about else (namespace not in ("", "default")):
        raise ApiError.invalid("events", name, f"involvedObject.namespace: Invalid value: {go_quote(about)}: "
                               "does not match event.namespace")


_SPEC: dict[str, Check] = {"pods": _pod_spec, "resourcequotas": _quota_spec}
_STATUS: dict[str, Check] = {"pods": _pod_status, "nodes": _node_status}


def check_write(resource: str, kind: str, new: Obj, old: Obj | None) -> None:
    """Refuse ``new`` if a part of it that is not ``old``'s own (all of it, on create) is malformed."""
    meta = new["metadata"]
    if old is None or meta is not old["metadata"]:
        check_metadata(kind, meta)
    name = meta.get("name") or meta.get("generateName") or ""
    if old is None or new.get("spec") is not old.get("spec"):
        _SPEC.get(resource, _any_spec)(kind, name, new.get("spec"))
    if old is None or new.get("status") is not old.get("status"):
        _STATUS.get(resource, _any_status)(kind, name, new.get("status"))
    if resource == "events":
        _event_fields(kind, name, new)


def check_binding(binding: Any) -> Obj:
    """The Binding's own fields that ``objects.bind`` reads, type-checked."""
    if not isinstance(binding, dict):
        raise ApiError.bad_request("expected a Binding object")
    meta = _map("Binding", "metadata", binding.get("metadata"))
    check_metadata("Binding", meta)
    target = _map("Binding", "target", binding.get("target"))
    _string("Binding", "target.name", target.get("name"))
    return binding
