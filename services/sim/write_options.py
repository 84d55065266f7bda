"""The options of a write request, read in one place: ``dryRun`` (``dryrun``) and ``fieldValidation``
(``field_validation``), as the real API server decodes a request's options before its body.

POST, PUT and PATCH carry both in the query (their CreateOptions, UpdateOptions or PatchOptions, named
in the real 422 of a bad value); dryRun is read first. A DELETE carries only dryRun, in its
DeleteOptions body or, without a body, in the query, and writes no object: nothing is validated. A
handler takes its options from here once, so every verb checks them in the same order with the same
errors. Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from services.sim import dryrun, field_validation
from services.sim.field_validation import Directive

OptionsKind = Literal["CreateOptions", "UpdateOptions", "PatchOptions"]


class Query(Protocol):
    """A request's query parameters, a name possibly repeated (aiohttp's ``request.query``)."""

    def getall(self, key: str, default: list[str], /) -> list[str]: ...

    def get(self, key: str, /) -> str | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOptions:
    dry_run: bool
    """``dryRun=All``: the write runs every step and stores nothing."""
    validation: Directive
    """What an unknown field of the written object costs (a DELETE writes none: Ignore)."""


def for_write(query: Query, options_kind: OptionsKind) -> WriteOptions:
    """A POST's, PUT's or PATCH's options (a binding is a POST: CreateOptions)."""
    dry_run = dryrun.requested(query.getall(dryrun.QUERY, []), options_kind)
    validation = field_validation.directive(query.get(field_validation.QUERY), options_kind)
    return WriteOptions(dry_run=dry_run, validation=validation)


def for_delete(body: Any, query: Query) -> WriteOptions:
    """A DELETE's or DELETE collection's options: its DeleteOptions ``body`` (None: none was sent)
    decides; the query only when there is no body."""
    return WriteOptions(dry_run=dryrun.from_delete_options(body, query.getall(dryrun.QUERY, [])),
                        validation=Directive.IGNORE)
