"""The event contract (shared.contract): generated from the code, committed current, compatible.

Matrix: the committed docs/events/ equal what the code generates; the code breaks no published
major; every catalogued kind and bucket has a schema; every real encoded event and KV entry
validates against its schema (and a body the codec refuses does not). The checker: an added
optional field and a bumped major pass; a removed field, a retyped field (type, nested type in
$defs, nullability, enum values, constant), a new required field (new, or optional before), a
renamed subject, a removed kind and a lowered major each fail with a message naming the break.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import msgpack
import pytest
from event_samples import allocation, inventory, node_events
from jsonschema import Draft202012Validator

from shared.codec import encode
from shared.contract import breaks, contract, messages
from shared.contract.document import event_message
from shared.contract.files import PUBLISHED_FILE, SCHEMA_DIR, render
from shared.events import CATALOGUE, Event
from shared.inventory_entries import encode_inventory
from shared.ledger_entries import encode_allocation
from shared.model import AllocationState

DOCS = Path(__file__).resolve().parents[2] / "docs" / "events"


def published() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DOCS / PUBLISHED_FILE).read_text())
    return loaded


def test_committed_contract_is_what_the_code_generates() -> None:
    files = render(importlib.metadata.version("gpubus"), published())
    stale = [name for name, text in files.items()
             if not (DOCS / name).is_file() or (DOCS / name).read_text() != text]
    extra = [p.name for p in (DOCS / SCHEMA_DIR).glob("*.json") if f"{SCHEMA_DIR}/{p.name}" not in files]
    assert not stale and not extra, (
        f"docs/events is not what the code generates (stale {stale}, extra {extra}): "
        "run `gpubus schema write` and commit the result")


def test_code_breaks_no_published_major() -> None:
    found = breaks(published(), contract())
    assert not found, "\n".join(map(str, found))


def test_every_kind_and_bucket_has_a_schema() -> None:
    names = {m.name for m in messages()}
    assert set(CATALOGUE) | {"kv.inventory", "kv.allocations", "kv.locks"} == names
    for m in messages():
        Draft202012Validator.check_schema(m.schema)


def validator(key: str) -> Draft202012Validator:
    return Draft202012Validator(contract()[key]["schema"])


@pytest.mark.parametrize("event", node_events("node-1"), ids=lambda e: e.KIND)
def test_every_encoded_event_validates_against_its_schema(event: Event) -> None:
    body = msgpack.unpackb(encode(event), raw=False)
    validator(f"{event.KIND}.v{event.VERSION}").validate(body)


def test_kv_entries_validate_against_their_bucket_schemas() -> None:
    validator("kv.inventory.v1").validate(msgpack.unpackb(encode_inventory(inventory("n1")), raw=False))
    entry = dataclasses.replace(allocation("n1", "u1", 500), state=AllocationState.APPLIED)
    validator("kv.allocations.v1").validate(msgpack.unpackb(encode_allocation(entry), raw=False))
    validator("kv.locks.v1").validate("scheduler-0")


@pytest.mark.parametrize(("change", "why"), [
    ({"v": 2}, "const"),
    ({"kind": "pod.rejected"}, "const"),
    ({"reasons": {"n1": 3}}, "type"),
    ({"ts": -1.0}, "minimum"),
    ({"name": None}, "type"),
])
def test_a_body_the_codec_refuses_fails_its_schema(change: dict[str, Any], why: str) -> None:
    body = msgpack.unpackb(encode(node_events("n1")[3]), raw=False) | change
    errors = list(validator("pod.unschedulable.v1").iter_errors(body))
    assert [e.validator for e in errors] == [why]


def test_schemas_let_unknown_fields_through() -> None:
    body = msgpack.unpackb(encode(node_events("n1")[1]), raw=False) | {"added_in_a_minor": 1}
    validator("pod.admitted.v1").validate(body)


# -- the compatibility checker on made-up kinds -------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    size: int
    label: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Thing(Event):
    KIND: ClassVar[str] = "test.thing"
    name: str
    count: int = 0
    state: AllocationState = AllocationState.DECIDED
    parts: tuple[Part, ...] = ()
    owner: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingWithOptional(Thing):
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingWithRequired(Thing):
    note: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingCountRequired(Event):
    KIND: ClassVar[str] = "test.thing"
    name: str
    count: int
    state: AllocationState = AllocationState.DECIDED
    parts: tuple[Part, ...] = ()
    owner: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingWithoutCount(Event):
    KIND: ClassVar[str] = "test.thing"
    name: str
    state: AllocationState = AllocationState.DECIDED
    parts: tuple[Part, ...] = ()
    owner: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingCountText(Event):
    KIND: ClassVar[str] = "test.thing"
    name: str
    count: str = ""
    state: AllocationState = AllocationState.DECIDED
    parts: tuple[Part, ...] = ()
    owner: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingOwnerOptional(Event):
    KIND: ClassVar[str] = "test.thing"
    name: str
    count: int = 0
    state: AllocationState = AllocationState.DECIDED
    parts: tuple[Part, ...] = ()
    owner: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartV2:
    size: float
    label: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingPartRetyped(Event):
    KIND: ClassVar[str] = "test.thing"
    name: str
    count: int = 0
    state: AllocationState = AllocationState.DECIDED
    parts: tuple[PartV2, ...] = ()
    owner: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingStateText(Event):
    KIND: ClassVar[str] = "test.thing"
    name: str
    count: int = 0
    state: str = "decided"
    parts: tuple[Part, ...] = ()
    owner: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingsRenamed(Thing):
    KIND: ClassVar[str] = "test.things"


@dataclass(frozen=True, slots=True, kw_only=True)
class ThingV2(ThingWithoutCount):
    VERSION: ClassVar[int] = 2


def contract_of(*classes: type[Event]) -> dict[str, Any]:
    out = {}
    for cls in classes:
        m = event_message(cls)
        out[m.key] = {"name": m.name, "major": m.major, "address": m.address, "schema": m.schema}
    return out


def found(new: type[Event], old: type[Event] = Thing) -> list[str]:
    return [str(b) for b in breaks(contract_of(old), contract_of(new))]


def test_an_unchanged_kind_has_no_breaks() -> None:
    assert found(Thing) == []


def test_an_added_optional_field_is_a_minor_change() -> None:
    assert found(ThingWithOptional) == []


def test_a_bumped_major_may_break_anything() -> None:
    assert found(ThingV2) == []


def test_a_removed_field_is_named() -> None:
    assert found(ThingWithoutCount) == [_msg("removed field count: consumers that read it lose it")]


def test_a_retyped_field_is_named() -> None:
    assert found(ThingCountText) == [_msg("retyped field count: was integer, now string")]


def test_a_retyped_nested_field_is_named() -> None:
    assert found(ThingPartRetyped) == [_msg("retyped field parts[].size: was integer, now number")]


def test_a_field_that_may_now_be_null_is_retyped() -> None:
    assert found(ThingOwnerOptional) == [_msg("retyped field owner: was string, now string or null")]


def test_changed_enum_values_are_a_retype() -> None:
    assert found(ThingStateText) == [
        _msg("retyped field state: was one of ['reserved', 'decided', 'applied', 'failed'], now string")]


def test_a_new_required_field_is_named() -> None:
    assert found(ThingWithRequired) == [
        _msg("new required field note: new field without a default: older events and entries lack it")]


def test_an_optional_field_made_required_is_named() -> None:
    assert found(ThingCountRequired) == [
        _msg("new required field count: was optional: older events and entries lack it")]


def test_a_renamed_subject_is_named() -> None:
    old = contract_of(Thing)
    new = contract_of(Thing)
    new["test.thing.v1"] = {**new["test.thing.v1"], "address": "gpubus.things.{node}"}
    assert [str(b) for b in breaks(old, new)] == [
        _msg("renamed subject: gpubus.test.thing.{node} is now gpubus.things.{node}")]


def test_a_renamed_kind_is_a_removed_subject() -> None:
    assert found(ThingsRenamed) == [_msg(
        "removed message: subject gpubus.test.thing.{node} is no longer published (removed or renamed)")]


def test_a_lowered_major_is_named() -> None:
    assert found(Thing, old=ThingV2) == [
        "test.thing.v2: major lowered: published at v2, the code has v1 (bump the event's major version, "
        "or keep the change compatible: see docs/events.md)"]


def test_every_break_of_a_change_is_listed() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Worse(Event):
        KIND: ClassVar[str] = "test.thing"
        name: int
        note: str

    assert [b.what for b in breaks(contract_of(Thing), contract_of(Worse))] == [
        "retyped field", "removed field", "removed field", "removed field", "removed field",
        "new required field"]


def _msg(text: str) -> str:
    return f"test.thing.v1: {text} (bump the event's major version, or keep the change compatible: " \
           "see docs/events.md)"
