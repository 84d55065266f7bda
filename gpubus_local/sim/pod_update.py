"""What an update may change in a pod's spec: the real API server's ``ValidatePodUpdate``, for the stand-in.

Once created, a pod's spec is fixed but for its containers' and init containers' images,
``activeDeadlineSeconds`` (set or lowered, never removed), tolerations (added; an existing one may
change only its ``tolerationSeconds``), ``terminationGracePeriodSeconds`` (to 1, if it was negative)
and scheduling gates (removed). Those fields are type-checked first, on create too
(``check_spec_types``): a wrong JSON type is the decoder's 400, as ``shapes`` words it.
``spec.nodeName`` is the binding subresource's and resources are the resize subresource's (not served
here). Anything else is a 422 ``Invalid`` with the real message and
``causes``, from which ``kubectl`` prints ``The Pod "p" is invalid: spec: Forbidden: ...``.

The spec is compared as the real server's decoder sees it: the fields that defaulting fills
(``objects.POD_SPEC_DEFAULTS``; ``priority`` kept from the stored pod, as the Priority admission
plugin does) are filled in first, and an absent field equals its zero value (``null``, ``false``,
``0``, ``""``, an empty list or map), as it does once decoded into Go types. Pure; knows no HTTP and no
store. Called for PUT and PATCH of a pod, never for its status or binding.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_errors import FieldError, forbidden, invalid, required
from gpubus_local.sim.jsonpatch import json_equal
from gpubus_local.sim.objects import spec_defaults
from gpubus_local.sim.shapes import undecodable
from shared.errors import clip

Obj = dict[str, Any]

UPDATABLE = ("`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
             "`spec.tolerations` (only additions to existing tolerations),"
             "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")
_MAX_INT32 = 2**31 - 1
_SHOWN_DIFFERENCES = 8


def checked_update(new: Obj, old: Obj) -> Obj:
    """``new`` as it is stored (defaults filled in) if its spec may follow ``old``'s; else a 422."""
    spec, old_spec = new.get("spec"), old.get("spec") or {}
    if spec is old_spec or not isinstance(spec, dict):
        return new
    check_spec_types(spec)
    spec = _defaulted(spec, old_spec)
    errors = update_errors(spec, old_spec)
    if errors:
        raise ApiError.invalid_fields("Pod", new["metadata"].get("name") or "", errors)
    return new if spec is new["spec"] else {**new, "spec": spec}


#: The lists an update may change, and the Go type of their elements.
_UPDATABLE_LISTS = (("tolerations", "v1.Toleration"), ("schedulingGates", "v1.PodSchedulingGate"))


def check_spec_types(spec: Any) -> None:
    """The decoder's 400 for a wrong JSON type in a field an update may change (the rest of the spec
    must stay as stored, or is ``shapes``'): ``activeDeadlineSeconds`` and a toleration's
    ``tolerationSeconds`` are int64 (not a fraction, not a bool), tolerations and scheduling gates lists
    of objects, a gate's name a string. Call it on create too: a real server decodes both alike."""
    if not isinstance(spec, dict):
        return  # shapes' 400
    _int64("spec.activeDeadlineSeconds", spec.get("activeDeadlineSeconds"))
    for name, go_type in _UPDATABLE_LISTS:
        items = spec.get(name)
        if items is None:
            continue
        path = f"spec.{name}"
        if not isinstance(items, list):
            raise undecodable("Pod", path, items, f"[]{go_type}")
        for item in items:
            if not isinstance(item, dict):
                raise undecodable("Pod", path, item, go_type)
            if name == "tolerations":
                _int64(f"{path}.tolerationSeconds", item.get("tolerationSeconds"))
            elif item.get("name") is not None and not isinstance(item["name"], str):
                raise undecodable("Pod", f"{path}.name", item["name"], "string")


def _int64(path: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise undecodable("Pod", path, value, "int64")


def update_errors(spec: Obj, old: Obj) -> list[FieldError]:
    """Why ``spec`` may not replace ``old`` (both defaulted), in the real server's order; [] if it may."""
    errors: list[FieldError] = []
    for name in ("containers", "initContainers"):
        found, stop = _container_errors(_list(spec.get(name)), _list(old.get(name)), f"spec.{name}")
        errors += found
        if stop:
            return errors
    found, stop = _deadline_errors(spec.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds"))
    errors += found
    if stop:
        return errors
    errors += _toleration_errors(_list(spec.get("tolerations")), _list(old.get("tolerations")))
    errors += _gate_errors(_list(spec.get("schedulingGates")), _list(old.get("schedulingGates")))
    munged, before = _canonical(_munged(spec, old)), _canonical(old)
    if not json_equal(munged, before):
        shown = list(_differences(before, munged, "spec"))[:_SHOWN_DIFFERENCES]
        errors.append(forbidden("spec", f"pod updates may not change fields other than {UPDATABLE}\n"
                                + "\n".join(shown)))
    return errors


def _defaulted(spec: Obj, old: Obj) -> Obj:
    filled = spec_defaults(spec)
    if "priority" in filled and "priority" in old:
        filled["priority"] = old["priority"]
    return {**spec, **filled} if filled else spec


def _container_errors(new: list[Any], old: list[Any], path: str) -> tuple[list[FieldError], bool]:
    if len(new) != len(old):
        return [forbidden(path, "pod updates may not add or remove containers")], True
    errors: list[FieldError] = []
    for i, container in enumerate(new):
        image = container.get("image") if isinstance(container, dict) else None
        if not image:
            errors.append(required(f"{path}[{i}].image"))
        elif isinstance(image, str) and image.strip() != image:
            errors.append(invalid(f"{path}[{i}].image", image,
                                  "must not have leading or trailing whitespace"))
    return errors, False


def _deadline_errors(new: Any, old: Any) -> tuple[list[FieldError], bool]:
    """Set or lowered, within an int32, never removed."""
    path = "spec.activeDeadlineSeconds"
    if new is not None:
        if not 0 <= new <= _MAX_INT32:  # an int64 (check_spec_types)
            return [invalid(path, new, f"must be between 0 and {_MAX_INT32}, inclusive")], True
        if isinstance(old, int | float) and old < new:
            return [invalid(path, new, "must be less than or equal to previous value")], True
    elif old is not None:
        return [invalid(path, None, "must not update from a positive integer to nil value")], False
    return [], False


def _toleration_errors(new: list[Any], old: list[Any]) -> list[FieldError]:
    """Tolerations may be added; an existing one may change only its ``tolerationSeconds``."""
    for kept in old:
        if not any(json_equal(_canonical(_sans_seconds(kept)), _canonical(_sans_seconds(t))) for t in new):
            return [forbidden("spec.tolerations", "existing toleration can not be modified except its "
                              "tolerationSeconds")]
    return []


def _gate_errors(new: list[Any], old: list[Any]) -> list[FieldError]:
    """Scheduling gates may only be removed."""
    names = {gate.get("name") for gate in old if isinstance(gate, dict)}
    return [forbidden(f"spec.schedulingGates[{i}].name",
                      f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'")
            for i, gate in enumerate(new) if isinstance(gate, dict) and gate.get("name") not in names]


def _munged(spec: Obj, old: Obj) -> Obj:
    """``spec`` with what an update may change taken from ``old``: equal to ``old`` unless something
    else changed."""
    munged = dict(spec)
    for name in ("containers", "initContainers"):
        if isinstance(spec.get(name), list):
            munged[name] = [_image_of(c, o) for c, o in zip(spec[name], _list(old.get(name)), strict=True)]
    for name in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        _set(munged, name, old.get(name))
    grace, old_grace = spec.get("terminationGracePeriodSeconds"), old.get("terminationGracePeriodSeconds")
    if isinstance(old_grace, int | float) and old_grace < 0 and grace == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    return munged


def _image_of(container: Any, old: Any) -> Any:
    if not isinstance(container, dict) or not isinstance(old, dict):
        return container
    result = dict(container)
    _set(result, "image", old.get("image"))
    return result


def _set(obj: Obj, key: str, value: Any) -> None:
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = value


def _sans_seconds(toleration: Any) -> Any:
    if not isinstance(toleration, dict):
        return toleration
    return {k: v for k, v in toleration.items() if k != "tolerationSeconds"}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _canonical(value: Any) -> Any:
    """``value`` without the map entries that decode to a Go zero value (as if they were absent)."""
    if isinstance(value, dict):
        kept = {key: _canonical(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if not _zero(item)}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def _zero(value: Any) -> bool:
    if isinstance(value, bool):
        return value is False
    if isinstance(value, int | float):
        return value == 0
    return value is None or value in ("", [], {})


def _differences(old: Any, new: Any, path: str) -> Iterator[str]:
    """The paths where ``new`` differs from ``old``, with both values (the real message's diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in dict.fromkeys([*old, *new]):
            yield from _differences(old.get(key), new.get(key), f"{path}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _differences(a, b, f"{path}[{i}]")
    elif not json_equal(old, new):
        yield f"  {path}: {_show(old)} -> {_show(new)}"


def _show(value: Any) -> str:
    return clip(orjson.dumps(value).decode(), 120)
