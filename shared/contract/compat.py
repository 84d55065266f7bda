"""The compatibility check: what a change to the contract breaks for someone coding against it.

Compares a published contract (``docs/events/published.json``: every major still published) with
the one the code defines now (:func:`shared.contract.contract`). Within one major a change may only
add optional fields (or new kinds, new buckets); anything else is a :class:`Break`:

- a removed field, a retyped field (type, nullability, the set of enum values, a constant), a new
  required field (old events in the stream and old entries in KV lack it), a renamed subject, a
  message no longer published at all.

A message whose major went up is not compared with the old major: a major may break anything,
and the old major stays published beside it for the window docs/events.md gives. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Break:
    """One incompatible change to a message of a major that was not bumped."""

    message: str
    """``allocation.decided.v1``."""
    what: str
    """``removed field``, ``retyped field``, ``new required field``, ``renamed subject``,
    ``removed message`` or ``major lowered``."""
    path: str = ""
    """The field, dotted from the message's root (``allocation.devices[][].usedmem``)."""
    detail: str = ""

    def __str__(self) -> str:
        where = f" {self.path}" if self.path else ""
        return f"{self.message}: {self.what}{where}: {self.detail} (bump the event's major version, " \
               "or keep the change compatible: see docs/events.md)"


def breaks(published: dict[str, Doc], current: dict[str, Doc]) -> list[Break]:
    """Every break of ``current`` against ``published`` (both ``key -> {name, major, address, schema}``)."""
    found: list[Break] = []
    for key, old in sorted(published.items()):
        new = current.get(key)
        if new is None:
            found.extend(_gone(key, old, current))
            continue
        if new["address"] != old["address"]:
            found.append(Break(message=key, what="renamed subject",
                               detail=f"{old['address']} is now {new['address']}"))
        found.extend(_Differ(key, old["schema"], new["schema"]).diff("", old["schema"], new["schema"]))
    return found


def _gone(key: str, old: Doc, current: dict[str, Doc]) -> list[Break]:
    majors = [m["major"] for m in current.values() if m["name"] == old["name"]]
    if any(major > old["major"] for major in majors):
        return []  # bumped: a new major may change anything
    if majors:
        return [Break(message=key, what="major lowered",
                      detail=f"published at v{old['major']}, the code has v{max(majors)}")]
    return [Break(message=key, what="removed message",
                  detail=f"subject {old['address']} is no longer published (removed or renamed)")]


def _resolve(node: Doc, root: Doc) -> Doc:
    seen = 0
    while "$ref" in node and seen < 32:
        ref: str = node["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref!r}")
        node = root["$defs"][ref.removeprefix("#/$defs/")]
        seen += 1
    return node


def _nullable(node: Doc, root: Doc) -> tuple[bool, Doc]:
    node = _resolve(node, root)
    options = node.get("anyOf")
    if options is not None:
        rest = [o for o in options if o.get("type") != "null"]
        if len(rest) == 1 and len(options) == 2:
            return True, _resolve(rest[0], root)
    return False, node


def _shape(node: Doc) -> str:
    if "const" in node:
        return "const"
    if "enum" in node:
        return "enum"
    kind = node.get("type")
    if kind == "object":
        return "map" if "additionalProperties" in node and "properties" not in node else "object"
    if kind == "array":
        return "tuple" if "prefixItems" in node else "array"
    return str(kind) if kind is not None else "any"


def _describe(node: Doc, nullable: bool) -> str:
    shape = _shape(node)
    text = {"const": f"constant {node.get('const')!r}", "enum": f"one of {node.get('enum')}",
            "map": "a map", "tuple": f"a list of {len(node.get('prefixItems', []))}",
            "array": "a list"}.get(shape, shape)
    return f"{text} or null" if nullable else text


@dataclass(frozen=True, slots=True)
class _Differ:
    """Compares two schema documents of one message; ``$ref`` resolves in each document's own ``$defs``."""

    key: str
    old_root: Doc
    new_root: Doc

    def diff(self, path: str, old: Doc, new: Doc) -> list[Break]:
        old_null, o = _nullable(old, self.old_root)
        new_null, n = _nullable(new, self.new_root)
        shape = _shape(o)
        retyped = (old_null, shape) != (new_null, _shape(n))
        if retyped or (shape in ("const", "enum") and _values(o) != _values(n)) or (
                shape == "tuple" and len(o["prefixItems"]) != len(n["prefixItems"])):
            return [Break(message=self.key, what="retyped field", path=path or "(root)",
                          detail=f"was {_describe(o, old_null)}, now {_describe(n, new_null)}")]
        if shape == "object":
            return self.diff_object(path, o, n)
        if shape == "map":
            return self.diff(f"{path}{{*}}", o["additionalProperties"], n["additionalProperties"])
        if shape == "array":
            return self.diff(f"{path}[]", o["items"], n["items"])
        if shape == "tuple":
            return [b for i, (a, c) in enumerate(zip(o["prefixItems"], n["prefixItems"], strict=True))
                    for b in self.diff(f"{path}[{i}]", a, c)]
        return []

    def diff_object(self, path: str, old: Doc, new: Doc) -> list[Break]:
        found: list[Break] = []
        old_props: Doc = old.get("properties", {})
        new_props: Doc = new.get("properties", {})
        prefix = f"{path}." if path else ""
        for name, schema in old_props.items():
            if name not in new_props:
                found.append(Break(message=self.key, what="removed field", path=prefix + name,
                                   detail="consumers that read it lose it"))
                continue
            found.extend(self.diff(prefix + name, schema, new_props[name]))
        was_required = set(old.get("required", ()))
        for name in new.get("required", ()):
            if name not in was_required:
                why = "was optional" if name in old_props else "new field without a default"
                found.append(Break(message=self.key, what="new required field", path=prefix + name,
                                   detail=f"{why}: older events and entries lack it"))
        return found


def _values(node: Doc) -> Any:
    return node["const"] if "const" in node else sorted(map(str, node["enum"]))
