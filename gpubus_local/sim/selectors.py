"""Field and label selectors as the API server parses them (pure; no I/O).

Field selectors: ``spec.nodeName=n1,status.phase!=Succeeded`` — ``=``, ``==``, ``!=``, commas AND;
only the fields a resource supports (others are a 400, as on a real server); a missing field
compares as the empty string; an event's ``source`` is derived, as the event registry derives it.
Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x,y)``, ``a`` (exists),
``!a`` (does not exist); and the structured ``LabelSelector`` (matchLabels + matchExpressions)
that webhook configurations use.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from gpubus_local.sim.errors import ApiError

Matcher = Callable[[Mapping[str, Any]], bool]

#: Fields each resource accepts in a field selector (the real server's conversion funcs).
FIELDS: dict[str, frozenset[str]] = {
    "pods": frozenset({
        "metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName", "status.phase",
        "spec.restartPolicy", "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName",
        "spec.hostNetwork",
    }),
    "nodes": frozenset({"metadata.name", "spec.unschedulable"}),
    "namespaces": frozenset({"metadata.name", "status.phase"}),
    "resourcequotas": frozenset({"metadata.name", "metadata.namespace"}),
    "events": frozenset({
        "metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
        "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
        "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
        "source", "type",
    }),
}

_FIELD_TERM = re.compile(r"^([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*)$")
_SET_TERM = re.compile(r"^([A-Za-z0-9_./-]+)\s+(in|notin)\s+\((.*)\)$")
_EQ_TERM = re.compile(r"^([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)$")
_KEY = re.compile(r"^(!?)\s*([A-Za-z0-9_./-]+)$")


def _always(_: Mapping[str, Any]) -> bool:
    return True


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _event_source(event: Mapping[str, Any]) -> str:
    """``source.component``, else ``reportingComponent`` (what events.k8s.io/v1 writers fill in)."""
    return field_value(event, ("source", "component")) or field_value(event, ("reportingComponent",))


#: Selectable fields that are not a path in the object.
_DERIVED: dict[tuple[str, str], Callable[[Mapping[str, Any]], str]] = {("events", "source"): _event_source}


def parse_field_selector(resource: str, text: str | None) -> tuple[Matcher, dict[str, str]]:
    """A matcher, plus the ``field=value`` equalities (used to index watchers by node)."""
    if not text:
        return _always, {}
    terms: list[tuple[Callable[[Mapping[str, Any]], str], bool, str]] = []
    equals: dict[str, str] = {}
    for raw in text.split(","):
        m = _FIELD_TERM.match(raw.strip())
        if not m:
            raise ApiError.bad_request(f'invalid field selector term "{raw}"')
        field, op, value = m.groups()
        if field not in FIELDS.get(resource, frozenset()):
            raise ApiError.bad_request(f'field label not supported: {field}')
        read = _DERIVED.get((resource, field)) or functools.partial(field_value, path=tuple(field.split(".")))
        terms.append((read, op != "!=", value))
        if op != "!=":
            equals[field] = value

    def match(obj: Mapping[str, Any]) -> bool:
        return all((read(obj) == value) is eq for read, eq, value in terms)

    return match, equals


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


LabelTest = Callable[[Mapping[str, str]], bool]


def _label_term(term: str) -> LabelTest:
    if m := _SET_TERM.match(term):
        key, op, values_text = m.groups()
        values = frozenset(v.strip() for v in values_text.split(",") if v.strip())
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ_TERM.match(term):
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _KEY.match(term):
        negate, key = m.groups()
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise ApiError.bad_request(f'unable to parse requirement: "{term}"')


def parse_label_selector(text: str | None) -> Matcher:
    """A matcher over a whole object (reads ``metadata.labels``)."""
    if not text:
        return _always
    tests = [_label_term(t) for t in _split_top_level(text)]

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(test(labels) for test in tests)

    return match


_EXPRESSION_OPS: dict[str, Callable[[str | None, bool, frozenset[str]], bool]] = {
    "In": lambda value, _has, values: value in values,
    "NotIn": lambda value, _has, values: value not in values,
    "Exists": lambda _value, has, _values: has,
    "DoesNotExist": lambda _value, has, _values: not has,
}


def structured_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelector`` (matchLabels AND matchExpressions); empty or None matches all."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        op = _EXPRESSION_OPS.get(expr.get("operator", ""))
        if op is None:
            raise ApiError.bad_request(f"unsupported selector operator {expr.get('operator')!r}")
        key = expr.get("key", "")
        if not op(labels.get(key), key in labels, frozenset(expr.get("values") or [])):
            return False
    return True
