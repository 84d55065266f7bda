"""Kubernetes strategic merge patch, as the simulated API server applies it to the kinds it serves.

What ``k8s.io/apimachinery/pkg/util/strategicpatch`` does for ``application/strategic-merge-patch+json``:
maps merge and ``null`` deletes, as in RFC 7386, but a list whose field is tagged ``patchStrategy:"merge"``
in ``k8s.io/api/core/v1`` (``corev1.PATCH_TAGS``) merges element by element on its ``patchMergeKey`` (a
list of primitives merges as a set) and every other list is replaced. The directives: ``$patch`` (``replace``
or ``delete`` in a map; in a list element, ``delete`` the element with that key or ``replace`` the
list), ``$setElementOrder/<field>``, ``$deleteFromPrimitiveList/<field>`` and ``$retainKeys``. As the
real server, ``$patch: merge`` is refused (``unknown patch type`` in a map, ``merging lists cannot yet
be specified`` in a list). Order follows the real rules: ``$setElementOrder`` first, then the patch's
own order, and elements only the server has keep their places among them (a new element without
``$setElementOrder`` goes first). Directives never reach the result: a real server drops them when
it decodes the merged map into its Go types, and this stand-in stores JSON, so they are applied or
removed here, also inside values that replace or add to the target.

Pure; knows no HTTP. ``PatchError`` says why a patch cannot be applied. Like ``merge_patch`` the
target is never mutated and unchanged subtrees are shared with the result (stored objects are
immutable), so a patch costs what it touches, not the size of the object.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import orjson

from gpubus_local.sim import corev1
from gpubus_local.sim.errors import PatchError
from shared.errors import clip

Json = Any
Map = dict[str, Any]

DIRECTIVE = "$patch"
RETAIN_KEYS = "$retainKeys"
SET_ELEMENT_ORDER = "$setElementOrder/"
DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"


Fields = Mapping[str, corev1.Field]
_NO_FIELDS: Fields = {}


def _fields(type_name: str | None) -> Fields:
    """The fields of a described type (``corev1.TYPES``, a kind's top-level type under its kind's name),
    with their patch tags (``corev1.PATCH_TAGS``). A kind or type not described has none: it merges as
    RFC 7386 (lists replaced) and still honours the directives; ``$retainKeys`` (sent by kubectl for
    ``merge,retainKeys`` lists) is honoured wherever it appears, as the real server does."""
    described = corev1.TYPES.get(type_name or "")
    return _NO_FIELDS if described is None else described.fields


def strategic_merge_patch(target: Json, patch: Json) -> Json:
    """``target`` with ``patch`` applied; the table is chosen by the target's ``kind``."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    original = target if isinstance(target, dict) else None
    return _merge_map(original, patch, original.get("kind") if original is not None else None)


# maps -----------------------------------------------------------------------------------------


def _merge_map(original: Map | None, patch: Map, type_name: str | None) -> Map:
    """``patch`` merged into ``original`` (None: into nothing, which only applies the directives)."""
    if DIRECTIVE in patch:
        return _map_directive(patch, type_name)
    fields = _fields(type_name)
    result = dict(original) if original is not None else {}
    if RETAIN_KEYS in patch:
        _retain_keys(result, patch)
    done = {_set_element_order(result, key[len(SET_ELEMENT_ORDER):], order, patch, fields)
            for key, order in patch.items() if key.startswith(SET_ELEMENT_ORDER)}
    for key, value in patch.items():
        if key in done or key == RETAIN_KEYS or key.startswith(SET_ELEMENT_ORDER):
            continue
        if key.startswith(DELETE_FROM_PRIMITIVE_LIST):
            _delete_from_primitive_list(result, key[len(DELETE_FROM_PRIMITIVE_LIST):], value)
        elif value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_value(result.get(key), value, fields.get(key))
    return result


def _map_directive(patch: Map, type_name: str | None) -> Map:
    directive = patch[DIRECTIVE]
    if directive == "replace":
        return _merge_map(None, {k: v for k, v in patch.items() if k != DIRECTIVE}, type_name)
    if directive == "delete":
        return {}
    raise PatchError(f"unknown patch type: {directive} in map: {_show(patch)}")


def _merge_value(original: Json, value: Json, field: corev1.Field | None) -> Json:
    if isinstance(value, dict):
        return _merge_map(original if isinstance(original, dict) else None, value,
                          field.item if field else None)
    if isinstance(value, list):
        return _merge_list(original if isinstance(original, list) else [], value, field)
    return value


def _retain_keys(result: Map, patch: Map) -> None:
    """Only the listed keys survive in the target, and the patch may set no others."""
    keep = patch[RETAIN_KEYS]
    if not isinstance(keep, list):
        raise PatchError("invalid patch format of retainKeys")
    for key, value in patch.items():
        if value is not None and key != RETAIN_KEYS and key not in keep and not key.startswith(
                (SET_ELEMENT_ORDER, DELETE_FROM_PRIMITIVE_LIST)):
            raise PatchError("invalid patch format of retainKeys")
    for key in [k for k in result if k not in keep]:
        del result[key]


def _delete_from_primitive_list(result: Map, name: str, values: Json) -> None:
    if not isinstance(values, list):
        raise PatchError("invalid patch format of primitive list")
    current = result.get(name)
    if isinstance(current, list):
        gone = {_identity(v) for v in values}
        result[name] = [v for v in current if _identity(v) not in gone]


# lists ----------------------------------------------------------------------------------------


def _merge_list(original: list[Any], patch: list[Any], field: corev1.Field | None,
                order: list[Any] | None = None) -> list[Any]:
    """``patch`` merged into ``original``, put in order once: by ``order`` (a ``$setElementOrder`` list)
    where there is one, else by the patch's own elements (the real ``mergeSlice``)."""
    if field is None or not field.merges:
        return [_merge_value(None, v, None) for v in patch]
    if not patch and order is None:
        return original  # an empty merge list changes nothing (null or ``$patch: replace`` empty it)
    merged, plain, server = _merge_elements(original, patch, field)
    return _in_order(merged, plain if order is None else order, server, field.merge_key)


def _merge_elements(original: list[Any], patch: list[Any],
                    field: corev1.Field) -> tuple[list[Any], list[Any], list[Any]]:
    """The merged elements in no particular order, the patch's plain elements (which order them) and the
    server's elements after deletions (whose order the others keep)."""
    if not patch:
        return original, patch, original
    if not field.merge_key:
        return _merge_primitives(original, patch), patch, original
    kept, plain = _special_elements(original, patch, field.merge_key)
    if plain is None:  # ``$patch: replace``: the plain elements alone, ordered (so keyed) as the server's
        return [_merge_map(None, element, field.item) for element in kept], [], kept
    return _merge_keyed(kept, plain, field), plain, kept


def _merge_primitives(original: list[Any], patch: list[Any]) -> list[Any]:
    merged: list[Any] = []
    seen: set[Hashable] = set()
    for value in (*original, *patch):
        if isinstance(value, dict | list):
            raise PatchError(f"cannot merge lists without merge key: {_show(value)} is not a primitive")
        if _identity(value) not in seen:
            seen.add(_identity(value))
            merged.append(value)
    return merged


def _special_elements(original: list[Any], patch: list[Any], key: str) -> tuple[list[Any], list[Map] | None]:
    """The target's elements after ``$patch: delete`` elements, and the patch's plain elements (None
    after a ``$patch: replace`` element: then the first list is the plain elements, which replace)."""
    plain: list[Map] = []
    replace = False
    for element in patch:
        if not isinstance(element, dict):
            raise PatchError(f"list element {_show(element)} of a list merged by {key!r} is not an object")
        directive = element.get(DIRECTIVE)
        if DIRECTIVE not in element:
            plain.append(element)
        elif directive == "delete":
            original = [o for o in original if not _has_key(o, key, _merge_key(element, key))]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise PatchError(f"unknown patch type: {directive} in map: {_show(element)}")
    return (plain, None) if replace else (original, plain)


def _merge_keyed(original: list[Any], plain: list[Map], field: corev1.Field) -> list[Any]:
    key = field.merge_key
    merged = list(original)
    for element in plain:
        value = _merge_key(element, key)
        at = next((i for i, o in enumerate(merged) if _has_key(o, key, value)), None)
        if at is None:
            merged.append(_merge_map(None, element, field.item))
        else:
            merged[at] = _merge_map(merged[at], element, field.item)
    return merged


def _merge_key(element: Map, key: str) -> Json:
    if key not in element:
        raise PatchError(f"map: {_show(element)} does not contain declared merge key: {key}")
    return element[key]


def _has_key(element: Json, key: str, value: Json) -> bool:
    if not isinstance(element, dict):
        raise PatchError(f"list element {_show(element)} of a list merged by {key!r} is not an object")
    return key in element and _identity(element[key]) == _identity(value)


# order ----------------------------------------------------------------------------------------


def _set_element_order(result: Map, name: str, order: Json, patch: Map, fields: Fields) -> str | None:
    """Merge list ``name`` now and put it in ``order``; ``name`` when done (the main loop skips it)."""
    if not isinstance(order, list):
        raise PatchError("invalid patch format of setElementOrder list")
    field = fields.get(name)
    if field is None or not field.merges:
        return None  # a replaced list keeps its own order: the directive only goes away
    original, value = result.get(name, []), patch.get(name, [])
    if not isinstance(original, list) or not isinstance(value, list):
        raise PatchError("invalid patch format of setElementOrder list")
    if name in result or name in patch:
        _check_order(value, order, field.merge_key)
        result[name] = _merge_list(original, value, field, order)
    return name


def _check_order(patch: list[Any], order: list[Any], key: str) -> None:
    """The patch's own elements come in the order ``$setElementOrder`` gives them."""
    wanted = [_ident_of(o, key) for o in order]
    at = 0
    for element in patch:
        if isinstance(element, dict) and DIRECTIVE in element:
            continue
        ident = _ident_of(element, key)
        while at < len(wanted) and wanted[at] != ident:
            at += 1
        if at == len(wanted):
            raise PatchError(f"The order in patch list:\n{_show(patch)}\n doesn't match $setElementOrder "
                             f"list:\n{_show(order)}\n")
        at += 1


def _in_order(merged: list[Any], order: list[Any], server: list[Any], key: str) -> list[Any]:
    """``merged`` with the elements named in ``order`` in that order and the others in their ``server``
    order, interleaved where ``server`` has both (the real ``normalizeElementOrder``)."""
    wanted = _positions(order, key)
    known = _positions(server, key)
    tagged = [(_ident_of(e, key), e) for e in merged]
    named = [e for _, e in sorted((t for t in tagged if t[0] in wanted), key=lambda t: wanted[t[0]])]
    rest = [e for _, e in sorted((t for t in tagged if t[0] not in wanted),
                                 key=lambda t: known.get(t[0], len(known)))]
    result: list[Any] = []
    i = j = 0
    while i < len(rest) or j < len(named):
        if j == len(named) or (i < len(rest) and _before(rest[i], named[j], known, key)):
            result.append(rest[i])
            i += 1
        else:
            result.append(named[j])
            j += 1
    return result


def _before(left: Json, right: Json, known: dict[Hashable, int], key: str) -> bool:
    a, b = known.get(_ident_of(left, key)), known.get(_ident_of(right, key))
    return a is not None and b is not None and a < b


def _positions(items: Iterable[Any], key: str) -> dict[Hashable, int]:
    positions: dict[Hashable, int] = {}
    for i, item in enumerate(items):
        positions.setdefault(_ident_of(item, key), i)
    return positions


def _ident_of(element: Json, key: str) -> Hashable:
    """What identifies an element: its merge key's value, or itself in a list of primitives (no key)."""
    if not key:
        return _identity(element)
    if not isinstance(element, dict):
        raise PatchError(f"list element {_show(element)} of a list merged by {key!r} is not an object")
    return _identity(_merge_key(element, key))


def _identity(value: Json) -> Hashable:
    """Equal for equal JSON values (``1`` is ``1.0``, ``true`` is not ``1``) and hashable."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    return ("json", orjson.dumps(value, option=orjson.OPT_SORT_KEYS))


def _show(value: Json) -> str:
    return clip(orjson.dumps(value).decode(), 300)
