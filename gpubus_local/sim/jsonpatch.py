"""RFC 6902 JSON Patch and RFC 7386 JSON Merge Patch, as the simulated API server applies them.

Pure functions over JSON values. ``apply_json_patch`` works on a copy and is atomic: if any
operation fails (bad pointer, failed ``test``), the input is untouched and ``PatchError`` says
which operation. ``merge_patch`` returns a new document that shares unchanged subtrees with the
input (stored objects are never mutated, so sharing is safe and saves copying).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gpubus_local.sim.errors import PatchError

Json = Any


def merge_patch(target: Json, patch: Json) -> Json:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def parse_pointer(pointer: str) -> list[str]:
    """``/a/b~1c`` -> ``["a", "b/c"]`` (``~1`` is ``/``, ``~0`` is ``~``)."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer {pointer!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} out of range")
    return index


def _parent(doc: Json, tokens: list[str]) -> Json:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError(f"path segment {token!r} does not exist")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, for_add=False)]
        else:
            raise PatchError(f"cannot descend into a scalar at {token!r}")
    return cur


def _get(doc: Json, tokens: list[str]) -> Json:
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path segment {last!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise PatchError("cannot read a member of a scalar")


def _add(doc: Json, tokens: list[str], value: Json) -> Json:
    if not tokens:
        return value
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise PatchError("cannot add a member to a scalar")
    return doc


def _remove(doc: Json, tokens: list[str]) -> tuple[Json, Json]:
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path segment {last!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, for_add=False))
    raise PatchError("cannot remove a member of a scalar")


def _op_add(doc: Json, op: dict[str, Any]) -> Json:
    return _add(doc, parse_pointer(op["path"]), _value(op))


def _op_remove(doc: Json, op: dict[str, Any]) -> Json:
    return _remove(doc, parse_pointer(op["path"]))[0]


def _op_replace(doc: Json, op: dict[str, Any]) -> Json:
    tokens = parse_pointer(op["path"])
    _get(doc, tokens)  # replace requires the target to exist
    if tokens:
        doc = _remove(doc, tokens)[0]
    return _add(doc, tokens, _value(op))


def json_equal(a: Json, b: Json) -> bool:
    """Equality of JSON values (RFC 6902 ``test``): types matter, so ``false`` is not ``0`` nor
    ``true`` ``1`` as they are in Python; numbers compare by value, whole or not."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float):
        return isinstance(b, int | float) and a == b
    return type(a) is type(b) and a == b


def _op_test(doc: Json, op: dict[str, Any]) -> Json:
    if not json_equal(_get(doc, parse_pointer(op["path"])), _value(op)):
        raise PatchError(f"test failed at {op['path']!r}")
    return doc


def _op_move(doc: Json, op: dict[str, Any]) -> Json:
    doc, value = _remove(doc, parse_pointer(_from(op)))
    return _add(doc, parse_pointer(op["path"]), value)


def _op_copy(doc: Json, op: dict[str, Any]) -> Json:
    value = orjson.loads(orjson.dumps(_get(doc, parse_pointer(_from(op)))))
    return _add(doc, parse_pointer(op["path"]), value)


def _value(op: dict[str, Any]) -> Json:
    if "value" not in op:
        raise PatchError(f"operation {op.get('op')!r} at {op.get('path')!r} needs a value")
    return op["value"]


def _from(op: dict[str, Any]) -> str:
    source = op.get("from")
    if not isinstance(source, str):
        raise PatchError(f"operation {op.get('op')!r} needs a 'from' pointer")
    return source


_OPS: dict[str, Callable[[Json, dict[str, Any]], Json]] = {
    "add": _op_add,
    "remove": _op_remove,
    "replace": _op_replace,
    "test": _op_test,
    "move": _op_move,
    "copy": _op_copy,
}


def apply_json_patch(doc: Json, ops: Json) -> Json:
    """Apply RFC 6902 operations to a copy of ``doc``; return the result or raise ``PatchError``."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be an array of operations")
    result = orjson.loads(orjson.dumps(doc))
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise PatchError(f"operation {i} is not an object with a string 'path'")
        handler = _OPS.get(str(op.get("op")))
        if handler is None:
            raise PatchError(f"operation {i}: unknown op {op.get('op')!r}")
        try:
            result = handler(result, op)
        except PatchError as e:
            raise PatchError(f"operation {i} ({op['op']} {op['path']}): {e}") from e
    return result
