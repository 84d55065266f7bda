"""The options of a write request, read in one place: ``dryRun`` (``dryrun``) and ``fieldValidation``
(``field_validation``), as the real API server decodes a request's options before its body.

POST, PUT and PATCH carry both in the query (their CreateOptions, UpdateOptions or PatchOptions, named
in the real 422 of a bad value); dryRun is read first. A DELETE writes no object, so it has no
``fieldValidation``: its ``DeleteOptions`` body (or, without a body, the query's dryRun) gives the dry
run and the ``preconditions``, decoded here once (``for_delete``). A handler takes its options from
here once, so every verb checks them in the same order with the same errors. Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gpubus_local.sim import dryrun, field_validation
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_validation import Directive

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Preconditions:
    """``DeleteOptions.preconditions``: what the deleted object must still be (None: anything)."""

    uid: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteOptions:
    dry_run: bool
    """``dryRun=All``: the delete runs every check and removes nothing."""
    preconditions: Preconditions = Preconditions()


_PRECONDITIONS = ("uid", "resourceVersion")


def for_delete(body: Any, query: Query) -> DeleteOptions:
    """A DELETE's or DELETE collection's options: its DeleteOptions ``body`` (None: none was sent)
    decides; the query only when there is no body. A body that is not an object, or preconditions
    that are not strings, are the decoder's 400."""
    dry_run = dryrun.from_delete_options(body, query.getall(dryrun.QUERY, []))
    pre = body.get("preconditions") if isinstance(body, dict) else None
    if pre is None:
        return DeleteOptions(dry_run=dry_run)
    if not isinstance(pre, dict) or not all(isinstance(pre.get(k), str | None) for k in _PRECONDITIONS):
        raise ApiError.bad_request("DeleteOptions.preconditions must hold uid and resourceVersion strings")
    return DeleteOptions(dry_run=dry_run, preconditions=Preconditions(
        uid=pre.get("uid"), resource_version=pre.get("resourceVersion")))
