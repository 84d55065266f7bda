"""JSONPatch (RFC 6902) from two JSON documents: the original pod and the mutated copy.

Diffing instead of hand-writing operations keeps the patch exactly equal to the mutation, so the
webhook is idempotent by construction: a second pass over its own output finds nothing to change.
Absent maps and lists are added whole (``/spec/containers/0/resources/limits``), appended list
items get explicit indexes, and pointer tokens escape ``~`` and ``/`` (``~0``, ``~1``).
"""

from __future__ import annotations

from services.webhook.reviews import PatchOp


def escape(token: str) -> str:
    """One JSON-Pointer reference token (``nvidia.com/gpu`` -> ``nvidia.com~1gpu``)."""
    return token.replace("~", "~0").replace("/", "~1")


def diff(old: object, new: object, path: str = "") -> list[PatchOp]:
    """Operations that turn ``old`` into ``new`` (identical sub-trees are skipped without a walk)."""
    if old is new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        return _diff_maps(old, new, path)
    if isinstance(old, list) and isinstance(new, list) and len(new) >= len(old):
        ops: list[PatchOp] = []
        for i, item in enumerate(old):
            ops += diff(item, new[i], f"{path}/{i}")
        ops += [{"op": "add", "path": f"{path}/{i}", "value": new[i]} for i in range(len(old), len(new))]
        return ops
    if type(old) is type(new) and old == new:
        return []
    return [{"op": "replace", "path": path, "value": new}]


def _diff_maps(old: dict[str, object], new: dict[str, object], path: str) -> list[PatchOp]:
    ops: list[PatchOp] = [{"op": "remove", "path": f"{path}/{escape(k)}"} for k in old if k not in new]
    for key, value in new.items():
        where = f"{path}/{escape(key)}"
        if key in old:
            ops += diff(old[key], value, where)
        else:
            ops.append({"op": "add", "path": where, "value": value})
    return ops
