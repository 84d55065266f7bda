"""A write request's options, read in one place (``gpubus_local.sim.write_options``).

Case matrix:
- POST, PUT, PATCH: no option is a real write with Warn; ``dryRun=All`` (once or repeated) and each
  ``fieldValidation`` value are read; a bad value of either is the real 422 naming the request's options
  kind (CreateOptions, UpdateOptions, PatchOptions); with both bad, dryRun's is the one answered;
- DELETE: the DeleteOptions body decides when there is one (the query is then not read), the query
  when there is none; ``dryRun`` null or empty is no dry run; its ``preconditions`` are read once
  (absent or null: none); a malformed body, dryRun or preconditions is a 400, a value other than
  All the 422. (The only delete-option cases: ``dryrun.from_delete_options`` is tested through here.)
"""

from __future__ import annotations

from typing import Any

import pytest
from multidict import MultiDict

from gpubus_local.sim import write_options
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_validation import Directive
from gpubus_local.sim.write_options import DeleteOptions, OptionsKind, Preconditions, WriteOptions

KINDS: tuple[OptionsKind, ...] = ("CreateOptions", "UpdateOptions", "PatchOptions")


def query(*pairs: tuple[str, str]) -> MultiDict[str]:
    return MultiDict(pairs)


@pytest.mark.parametrize(("pairs", "expected"), [
    ((), WriteOptions(dry_run=False, validation=Directive.WARN)),
    ((("dryRun", "All"),), WriteOptions(dry_run=True, validation=Directive.WARN)),
    ((("dryRun", "All"), ("dryRun", "All")), WriteOptions(dry_run=True, validation=Directive.WARN)),
    ((("fieldValidation", ""),), WriteOptions(dry_run=False, validation=Directive.WARN)),
    ((("fieldValidation", "Strict"),), WriteOptions(dry_run=False, validation=Directive.STRICT)),
    ((("fieldValidation", "Ignore"), ("dryRun", "All")),
     WriteOptions(dry_run=True, validation=Directive.IGNORE)),
])
@pytest.mark.parametrize("kind", KINDS)
def test_a_write_reads_dry_run_and_field_validation_from_its_query(
    pairs: tuple[tuple[str, str], ...], expected: WriteOptions, kind: OptionsKind
) -> None:
    assert write_options.for_write(query(*pairs), kind) == expected


@pytest.mark.parametrize(("pairs", "field"), [
    ((("dryRun", "true"),), "dryRun"),
    ((("dryRun", "All"), ("dryRun", "x")), "dryRun"),
    ((("fieldValidation", "strict"),), "fieldValidation"),
    ((("fieldValidation", "Bogus"), ("dryRun", "Some")), "dryRun"),  # dryRun is read first
])
@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_option_is_the_real_422_naming_the_options_kind(
    pairs: tuple[tuple[str, str], ...], field: str, kind: OptionsKind
) -> None:
    with pytest.raises(ApiError) as info:
        write_options.for_write(query(*pairs), kind)
    assert (info.value.code, info.value.reason) == (422, "Invalid")
    assert info.value.message.startswith(f'{kind}.meta.k8s.io "" is invalid: {field}: Unsupported value: ')
    assert info.value.details["causes"][0]["field"] == field


@pytest.mark.parametrize(("body", "pairs", "dry"), [
    (None, (), False),
    (None, (("dryRun", "All"),), True),
    ({"kind": "DeleteOptions", "dryRun": ["All"]}, (), True),
    ({"kind": "DeleteOptions"}, (("dryRun", "All"),), False),  # the body decides
    ({"kind": "DeleteOptions", "propagationPolicy": "Background"}, (("dryRun", "All"),), False),
    ({"dryRun": None}, (), False),
    ({"dryRun": []}, (), False),
])
def test_a_delete_reads_its_body_or_else_its_query(
    body: Any, pairs: tuple[tuple[str, str], ...], dry: bool
) -> None:
    assert write_options.for_delete(body, query(*pairs)) == DeleteOptions(dry_run=dry)


@pytest.mark.parametrize(("body", "expected"), [
    ({"preconditions": None}, Preconditions()),
    ({"preconditions": {}}, Preconditions()),
    ({"preconditions": {"uid": "u1"}}, Preconditions(uid="u1")),
    ({"preconditions": {"resourceVersion": "7", "uid": None}}, Preconditions(resource_version="7")),
])
def test_a_delete_reads_its_preconditions_once(body: Any, expected: Preconditions) -> None:
    options = write_options.for_delete({"dryRun": ["All"], **body}, query())
    assert options == DeleteOptions(dry_run=True, preconditions=expected)


@pytest.mark.parametrize(("body", "pairs", "code"), [
    ({"dryRun": "All"}, (), 400),
    ({"dryRun": [1]}, (), 400),
    (["All"], (), 400),
    ({"preconditions": "x"}, (), 400),
    ({"preconditions": {"resourceVersion": 1}}, (), 400),
    ({"preconditions": {"uid": 0}}, (), 400),
    ({"dryRun": ["Some"]}, (), 422),
    (None, (("dryRun", "Some"),), 422),
])
def test_a_bad_delete_option_is_refused(body: Any, pairs: tuple[tuple[str, str], ...], code: int) -> None:
    with pytest.raises(ApiError) as info:
        write_options.for_delete(body, query(*pairs))
    assert info.value.code == code
