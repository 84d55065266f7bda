"""The subresources the simulated API server serves, in one table: discovery (``/api/v1``), the routes
and the OpenAPI paths are all made from it, so none of them can name one that the others lack.

An entry says what a client sees — the path under an object, the kind it reads or writes, the
discovery verbs (which are also the HTTP methods served) — and not which handler serves it: that is
the server's (``apiserver``), as the document's wording is ``openapi``'s. Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SubVerb = Literal["create", "get", "patch", "update"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subresource:
    resource: str
    """The resource whose objects have it (``pods``)."""
    name: str
    """The last segment of its path: ``/api/v1/namespaces/{ns}/pods/{name}/<name>``."""
    kind: str
    """What it reads or writes: its resource's kind, or ``Binding``."""
    verbs: tuple[SubVerb, ...]
    """As discovery lists them; each is one HTTP method (create POST, get GET, update PUT, patch PATCH)."""
    collection: str = ""
    """A namespace's collection that takes the same writes (``bindings``, the older form of
    ``pods/binding``), listed in discovery as a resource of its own; empty: none."""


SUBRESOURCES = (
    Subresource(resource="pods", name="binding", kind="Binding", verbs=("create",), collection="bindings"),
    Subresource(resource="pods", name="log", kind="Pod", verbs=("get",)),
    Subresource(resource="pods", name="status", kind="Pod", verbs=("get", "patch", "update")),
    Subresource(resource="nodes", name="status", kind="Node", verbs=("get", "patch", "update")),
)
"""In discovery's order."""
