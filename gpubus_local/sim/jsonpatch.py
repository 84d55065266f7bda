"""RFC 6902 JSON Patch (the ``jsonpatch`` library) and RFC 7386 JSON Merge Patch, as the simulated API
server applies them.

``apply_json_patch`` works on a copy and is atomic: if any operation fails (bad pointer, failed
``test``, a malformed operation), the input is untouched and ``PatchError`` says which operation
failed and why, which the API server answers as a real one does. ``merge_patch`` returns a new
document that shares unchanged subtrees with the input (stored objects are never mutated, so sharing
is safe and saves copying).
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer
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


def apply_json_patch(doc: Json, ops: Json) -> Json:
    """Apply RFC 6902 operations to a copy of ``doc``; return the result or raise ``PatchError``."""
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be an array of operations")
    result = orjson.loads(orjson.dumps(doc))  # the copy the operations change (faster than deepcopy)
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise PatchError(f"operation {i} is not an object with a string 'path'")
        try:
            result = jsonpatch.JsonPatch([op]).apply(result, in_place=True)
        except jsonpatch.JsonPatchTestFailed as e:
            raise PatchError(f"operation {i} (test {op['path']}): test failed: {e}") from e
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
            raise PatchError(f"operation {i} ({op.get('op')} {op['path']}): {e}") from e
    return result
