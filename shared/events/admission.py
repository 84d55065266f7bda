"""Admission events: the webhook's verdict on each pod it saw."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from shared.events.base import Event
from shared.model import ContainerRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class PodAdmitted(Event):
    """A GPU pod was admitted; ``mutations`` lists the JSONPatch paths the webhook changed."""

    KIND: ClassVar[str] = "pod.admitted"

    namespace: str
    name: str
    uid: str = ""
    requests: tuple[ContainerRequest | None, ...] = ()
    """Per container, init first; None for a container without GPU."""
    mutations: tuple[str, ...] = field(default_factory=tuple)
    scheduler_name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodRejected(Event):
    """A pod was denied at admission, with the message the user saw."""

    KIND: ClassVar[str] = "pod.rejected"

    namespace: str
    name: str
    uid: str = ""
    reason: str
