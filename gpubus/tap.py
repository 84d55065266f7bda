"""``gpubus tap`` rendering and filtering: one event -> one readable line or one JSON line.

Pure functions over decoded events; no NATS, no I/O. The line of each kind is
:mod:`shared.event_text` (the dashboard's feed shows the same). The command itself lives in
:mod:`gpubus.tap_cli`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import orjson

from shared.codec import to_wire
from shared.event_text import format_ts, pods_of
from shared.events import SUBJECT_ROOT, Event, node_token

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


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
    as_cloudevents: bool = False
    """One CloudEvents JSON line per event (undecodable messages go to stderr)."""
    count: int | None = None
    """Stop after this many printed lines."""
    stop_after_s: float | None = None
    """Stop after this many seconds."""
