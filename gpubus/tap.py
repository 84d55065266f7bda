"""``gpubus tap`` rendering and filtering: one event -> one readable line or one JSON line.

Pure functions over decoded events; no NATS, no I/O. The command itself lives in
:mod:`gpubus.tap_cli`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from shared.codec import to_wire
from shared.events import (
    SUBJECT_ROOT,
    AllocationApplied,
    AllocationDecided,
    AllocationFailed,
    AllocationMismatch,
    AllocationReleased,
    DeviceHealth,
    Event,
    Inventory,
    PodAdmitted,
    PodRejected,
    PodUnschedulable,
    Usage,
    UsageOverLimit,
    node_token,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_MIB = 1 << 20


def parse_since(text: str) -> float:
    """``10m``/``30s``/``2h``/``1d``/``500ms``/plain seconds -> seconds (ValueError if not)."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"--since {text!r}: expected a duration like 30s, 10m, 2h or 1d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def replay_from(since: str | None, replay_all: bool, now: float) -> str | float:
    """``--since``/``--all`` -> the consumer's deliver policy: "new", "all" or a unix time."""
    if since is not None and replay_all:
        raise ValueError("--since and --all: give one or the other")
    if replay_all:
        return "all"
    if since is None:
        return "new"
    seconds = parse_since(since)
    return "all" if seconds >= now else now - seconds


def full_subject(subject: str) -> str:
    """Accept ``allocation.>`` as shorthand for ``gpubus.allocation.>``; ValueError for a subject
    NATS would refuse only after we connected (or answer with an unclear JetStream error)."""
    shorthand = not (subject == SUBJECT_ROOT or subject.startswith(SUBJECT_ROOT + "."))
    full = f"{SUBJECT_ROOT}.{subject}" if shorthand else subject
    tokens = full.split(".")
    for i, token in enumerate(tokens):
        problem = _token_problem(token, last=i == len(tokens) - 1)
        if problem is not None:
            raise ValueError(f"subject {subject!r}: {problem}")
    return full


def _token_problem(token: str, *, last: bool) -> str | None:
    if not token:
        return "empty token (two dots, or a dot at an end)"
    if any(c.isspace() for c in token):
        return f"whitespace in {token!r}"
    if token not in ("*", ">") and ("*" in token or ">" in token):
        return f"{token!r}: a wildcard must be a whole token"
    if token == ">" and not last:
        return "'>' must be the last token"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class TapFilter:
    """Which events to show: all, or those of one node and/or one pod (``namespace/name``)."""

    node: str | None = None
    pod: tuple[str, str] | None = None

    @classmethod
    def parse(cls, node: str | None, pod: str | None) -> TapFilter:
        if pod is None:
            return cls(node=node)
        ns, sep, name = pod.partition("/")
        if not sep or not ns or not name:
            raise ValueError(f"--pod {pod!r}: expected NAMESPACE/NAME")
        return cls(node=node, pod=(ns, name))

    def matches(self, event: Event) -> bool:
        if self.node is not None and event.node != self.node:
            return False
        return self.pod is None or self.pod in pods_of(event)

    def matches_subject(self, subject: str) -> bool:
        """For messages that could not be decoded: only the subject (node as a token) is known."""
        return self.node is None or subject.rsplit(".", 1)[-1] == node_token(self.node)


def pods_of(event: Event) -> set[tuple[str, str]]:
    """Every (namespace, name) an event concerns."""
    if isinstance(event, AllocationDecided):
        return {(event.allocation.namespace, event.allocation.name)}
    if isinstance(event, Usage):
        return {(c.namespace, c.pod) for c in event.containers}
    if isinstance(event, UsageOverLimit):
        return {(event.namespace, event.pod)}
    ns, name = getattr(event, "namespace", None), getattr(event, "name", None)
    return {(ns, name)} if isinstance(ns, str) and isinstance(name, str) else set()


def _pod(ns: str, name: str) -> str:
    return f"{ns}/{name}"


def _decided(e: AllocationDecided) -> str:
    a = e.allocation
    cards = [f"{d.uuid}:{d.usedmem}MiB/{d.usedcores}%" for slot in a.devices for d in slot]
    return f"{_pod(a.namespace, a.name)} {a.state} devices=[{' '.join(cards)}]"


def _usage(e: Usage) -> str:
    used = sum(d.used_bytes for c in e.containers for d in c.devices)
    return f"containers={len(e.containers)} used={used // _MIB}MiB"


#: kind -> key facts of that event, after time, kind and node.
_FACTS: dict[type[Event], Callable[[Any], str]] = {
    PodAdmitted: lambda e: f"{_pod(e.namespace, e.name)} gpu-containers="
                           f"{sum(r is not None for r in e.requests)} scheduler={e.scheduler_name}",
    PodRejected: lambda e: f"{_pod(e.namespace, e.name)} reason={e.reason!r}",
    PodUnschedulable: lambda e: f"{_pod(e.namespace, e.name)} "
                                + "; ".join(f"{n}: {r}" for n, r in sorted(e.reasons.items())),
    AllocationDecided: _decided,
    AllocationReleased: lambda e: f"{_pod(e.namespace, e.name)} why={e.why}",
    AllocationApplied: lambda e: f"{_pod(e.namespace, e.name)} container={e.container} "
                                 f"devices={','.join(e.device_ids)} complete={e.complete}",
    AllocationFailed: lambda e: f"{_pod(e.namespace, e.name)} reason={e.reason!r}",
    AllocationMismatch: lambda e: f"{_pod(e.namespace, e.name)} container={e.container} "
                                  f"expected={','.join(e.expected)} actual={','.join(e.actual)}",
    Inventory: lambda e: f"devices={len(e.devices)} healthy={sum(d.health for d in e.devices)} "
                         f"generation={e.generation}",
    DeviceHealth: lambda e: f"{e.uuid} {'healthy' if e.healthy else 'UNHEALTHY'}"
                            + (f" reason={e.reason!r}" if e.reason else ""),
    Usage: _usage,
    UsageOverLimit: lambda e: f"{_pod(e.namespace, e.pod)} container={e.container} {e.uuid} "
                              f"used={e.used_bytes // _MIB}MiB limit={e.limit_bytes // _MIB}MiB",
}


def format_ts(ts: float) -> str:
    """``HH:MM:SS.mmm`` local time, or ``ts=<raw value>`` for one no clock can show (NaN, inf, 1e300):
    the line matters more than its time."""
    try:
        return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"
    except (ValueError, OverflowError, OSError):
        return f"ts={ts!r}"


def render_line(event: Event) -> str:
    """``12:00:01.123 allocation.decided node-1 ns/pod ... facts``."""
    facts = _FACTS.get(type(event), lambda e: "")(event)
    return f"{format_ts(event.ts)} {event.KIND:<20} {event.node or '-':<12} {facts}".rstrip()


def render_json(event: Event) -> str:
    body = to_wire(event)
    body["kind"] = event.KIND
    body["v"] = event.VERSION
    return orjson.dumps(body).decode()


def render_undecodable(subject: str, size: int, reason: str, *, as_json: bool) -> str:
    """An event that failed to decode is shown, never dropped."""
    if as_json:
        body = {"undecodable": True, "subject": subject, "bytes": size, "reason": reason}
        return orjson.dumps(body).decode()
    return f"{format_ts(time.time())} {'UNDECODABLE':<20} {subject} ({size} bytes): {reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TapOptions:
    """What one ``gpubus tap`` run shows and when it stops."""

    subject: str = f"{SUBJECT_ROOT}.>"
    deliver: str | float = "new"
    """"new", "all", or the unix time to replay from."""
    selector: TapFilter = TapFilter()
    as_json: bool = False
    count: int | None = None
    """Stop after this many printed lines."""
    stop_after_s: float | None = None
    """Stop after this many seconds."""
