"""Server-side field validation of the objects written to the simulated API server: the
``fieldValidation`` query parameter and the real server's strict decoding.

``directive`` reads the parameter: empty is Warn (the real server's default for create, update and
patch), anything but Ignore/Warn/Strict is the real 422 on the request's options. ``decoded`` walks a
written object with the ``corev1`` table and finds the fields its type does not have, in document
order and in the decoder's notation (``spec.containers[0].resouces``); the object it returns has none
of them, as the real server decodes into Go structs and never stores an unknown field, whatever the
directive. Strict makes them the real error (400 on create and update, 422 on patch), Warn one
``Warning`` header each. What ``corev1`` does not describe (opaque types, maps, a kind's generic
schema) is accepted as it is. Duplicate fields cannot be seen: the JSON decoder has kept the last.
Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from gpubus_local.sim import corev1
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_errors import go_format, go_quote, invalid_text, not_supported

QUERY = "fieldValidation"
_SUPPORTED = '"", "Ignore", "Strict", "Warn"'


class Directive(StrEnum):
    IGNORE = "Ignore"
    WARN = "Warn"
    STRICT = "Strict"


@dataclass(frozen=True, slots=True, kw_only=True)
class Decoded:
    obj: Any
    """The written object without its unknown fields (the very object when it had none)."""
    unknown: tuple[str, ...]
    warnings: tuple[str, ...]
    """``Warning`` header values (Warn only), one per unknown field."""


def directive(value: str | None, options_kind: str) -> Directive:
    """The request's ``fieldValidation``; ``options_kind``: CreateOptions, UpdateOptions or PatchOptions."""
    if not value:
        return Directive.WARN
    try:
        return Directive(value)
    except ValueError:
        error = not_supported(QUERY, go_quote(value), _SUPPORTED)
        raise ApiError.invalid_fields(options_kind, "", [error], group="meta.k8s.io") from None


def decoded(kind: str, obj: Any, validation: Directive, *, patch: Any = None,
            strategic: bool = False) -> Decoded:
    """``obj`` (a create's or update's body, or a patched object when ``patch`` is its patch) as the
    decoder keeps it; Strict with unknown fields raises the error of the verb.

    A merge or strategic patch (an object) walks only the parts of ``obj`` it touched: the stored
    object had no unknown field, so any comes from the patch, and a status write (two a pod) then
    costs what the patch holds, not the whole pod. A list it touched is walked whole, since merging
    may have moved its elements; paths are the patched object's, as the real decoder reports them."""
    unknown: list[str] = []
    touched = patch if isinstance(patch, dict) else _ALL
    kept = _object(obj, corev1.kind_type(kind), "", unknown, touched)
    if unknown and validation is Directive.STRICT:
        if patch is None:
            raise ApiError.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: '
                                       f"{strict_message(unknown)}")
        raise patch_error(unknown, go_format(patch) if strategic else orjson.dumps(obj).decode())
    warnings = tuple(dict.fromkeys(warning(path) for path in unknown)) if validation is Directive.WARN else ()
    return Decoded(obj=kept, unknown=tuple(unknown), warnings=warnings)


def strict_message(unknown: list[str]) -> str:
    return "strict decoding error: " + ", ".join(f"unknown field {go_quote(path)}" for path in unknown)


def patch_error(unknown: list[str], patch_text: str) -> ApiError:
    """The 422 of a patch that leaves unknown fields: ``field.Invalid("patch", <patch>, <strict error>)``
    in an Invalid Status without group, kind or name, as the real patch handler words it."""
    error = invalid_text("patch", go_quote(patch_text), strict_message(unknown))
    return ApiError.invalid_fields("", "", [error])


def warning(path: str) -> str:
    """A ``Warning`` header value (RFC 7234 code 299, agent ``-``) for one unknown field."""
    text = f"unknown field {go_quote(path)}"
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: ``touched`` meaning "all of it" (a create, an update, a JSON patch, a list a patch touched).
_ALL: Any = object()


def _walk(value: Any, type_: str, path: str, unknown: list[str], touched: Any) -> Any:
    container, name = corev1.element(type_)
    described = corev1.TYPES.get(name)
    if described is None or container == "map":
        return value
    if container != "list":
        return _object(value, described, path, unknown, touched)
    if not isinstance(value, list):
        return value
    items = [_object(item, described, f"{path}[{i}]", unknown, _ALL) for i, item in enumerate(value)]
    return value if all(new is old for new, old in zip(items, value, strict=True)) else items


def _object(value: Any, type_: corev1.TypeDef, path: str, unknown: list[str], touched: Any) -> Any:
    """``value`` without the fields ``type_`` lacks (of those ``touched`` names, in document order);
    the same object when nothing below changed."""
    if not isinstance(value, dict):
        return value  # a wrong JSON type is the shape checks' 400
    partial = touched is not _ALL and isinstance(touched, dict)
    kept: dict[str, Any] | None = None
    for key, item in value.items():
        if partial and key not in touched:
            continue
        field = type_.fields.get(key)
        if field is None and type_.open:
            continue
        at = f"{path}.{key}" if path else key
        if field is None:
            unknown.append(at)
            kept = dict(value) if kept is None else kept
            del kept[key]
            continue
        new = _walk(item, field.type, at, unknown, touched[key] if partial else _ALL)
        if new is not item:
            kept = dict(value) if kept is None else kept
            kept[key] = new
    return value if kept is None else kept
