"""Server-side dry run: the ``dryRun`` option of writes, as the real API server reads it, and what a
dry run answers.

``dryRun=All`` (a query parameter of POST, PUT and PATCH; for DELETE, ``DeleteOptions.dryRun`` of the
body, or the query when there is no body, as the real handlers decode it) makes the write run every step
of the real one — decoding, field validation, defaulting, admission (webhooks see ``dryRun: true``),
conflict and precondition checks, the pod update rules — and answer what would have been stored, while
nothing is stored: no watch event, no new resourceVersion. The store decides that (``Store`` takes
``dry_run`` as the real ``DryRunnableStorage`` does); this module only reads the option and shapes the
answer. Any value other than ``All`` is the real 422 on the request's options (``ValidateDryRun``). Pure;
no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_errors import go_quote, not_supported

Obj = dict[str, Any]

ALL = "All"
"""The only value a real server accepts: every stage of the request runs, none persists."""
QUERY = "dryRun"


def requested(values: Sequence[str], options_kind: str) -> bool:
    """Whether a request is a dry run, from every ``dryRun`` value it carried (the query parameter may
    repeat); ``options_kind`` names its options in the error: CreateOptions, UpdateOptions, PatchOptions
    or DeleteOptions."""
    if any(value != ALL for value in values):
        raise unsupported(values, options_kind)
    return bool(values)


def from_delete_options(options: Any, query: Sequence[str]) -> bool:
    """A DELETE's dry run: from the DeleteOptions body when it has one (the query is then not read,
    as by the real handler), else from the query."""
    if options is None:
        return requested(query, "DeleteOptions")
    if not isinstance(options, dict):
        raise ApiError.bad_request("expected a DeleteOptions object")
    values = options.get(QUERY)
    if values is None:
        return False
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise ApiError.bad_request("DeleteOptions.dryRun must be a list of strings")
    return requested(values, "DeleteOptions")


def unsupported(values: Sequence[str], options_kind: str) -> ApiError:
    """The real 422: ``CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value:
    []string{"x"}: supported values: "All"`` (Go's ``%#v`` of the values), with its cause."""
    shown = "[]string{" + ", ".join(go_quote(value) for value in values) + "}"
    error = not_supported(QUERY, shown, go_quote(ALL))
    return ApiError.invalid_fields(options_kind, "", [error], group="meta.k8s.io")


def created(obj: Obj) -> Obj:
    """What a dry-run create answers: the object as it would be stored, with the name, uid and
    creationTimestamp made for it (a real server's answer has them too, and they are never used
    again), and no resourceVersion, since none was taken."""
    meta = {key: value for key, value in obj["metadata"].items() if key != "resourceVersion"}
    return {**obj, "metadata": meta}


def updated(obj: Obj, stored: Obj) -> Obj:
    """What a dry-run update or patch answers: the object as it would be stored, at the stored
    object's resourceVersion (nothing was written, so the version has not moved)."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": stored["metadata"]["resourceVersion"]}}
