"""The envelope every event carries: kind, major version, id, timestamp, source, node."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

SUBJECT_ROOT = "gpubus"
#: Subject token used when an event concerns no particular node.
NO_NODE = "_"


def new_event_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of all events. ``KIND`` is ``<family>.<verb>``; ``VERSION`` is the major version."""

    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    id: str = field(default_factory=new_event_id)
    """Unique; also sent as ``Nats-Msg-Id`` so JetStream drops duplicates."""
    ts: float = field(default_factory=time.time)
    """Unix seconds (UTC) when the event was made."""
    source: str = ""
    """Who made it, e.g. ``scheduler/gpubus-scheduler-0``."""
    node: str = ""
    """The node the event concerns, last subject token; empty means none."""


def node_token(node: str) -> str:
    """A node name as one subject token: ``.``, space, ``*``, ``>`` (NATS splits or matches on them)
    become ``_``; an empty name is :data:`NO_NODE`. Subscribers build their filters with it."""
    node = node or NO_NODE
    if "." in node or " " in node or "*" in node or ">" in node:
        node = node.replace(".", "_").replace(" ", "_").replace("*", "_").replace(">", "_")
    return node


def subject_for(event: Event) -> str:
    """``gpubus.<family>.<verb>.<node>`` with the node as :func:`node_token` writes it."""
    return f"{SUBJECT_ROOT}.{event.KIND}.{node_token(event.node)}"
