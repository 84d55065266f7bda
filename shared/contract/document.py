"""What gpubus publishes, as data: one :class:`Message` per event kind and KV bucket, its JSON
Schema, and the AsyncAPI 3.0 document that lists them all.

The table is built from :data:`shared.events.CATALOGUE` (so a new event kind is published the moment
it is catalogued) and from the KV entry types of :mod:`shared.bus.buckets`. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.bus.buckets import ALLOCATIONS, INVENTORY, LOCKS, STREAM
from shared.contract.jsonschema import DIALECT, JsonSchema, class_doc, dataclass_schema
from shared.events import CATALOGUE, SUBJECT_ROOT, Event, Inventory
from shared.model import Allocation

#: The content type of every event body and of the inventory and allocation entries.
MSGPACK = "application/msgpack"
#: Major version of the ``allocations`` entry (an :class:`~shared.model.Allocation`, no ``v`` field).
ALLOCATION_ENTRY_MAJOR = 1
#: Major version of a ``locks`` entry (the holder's id as UTF-8).
LOCK_ENTRY_MAJOR = 1
#: The channel parameter every event subject ends with.
NODE_PARAMETER = ("The node the event concerns as one subject token: '.', ' ', '*' and '>' in the "
                  "name become '_'; '_' alone when no node applies.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One published message shape: an event kind at one major, or one KV bucket's entries."""

    name: str
    """``allocation.decided`` for an event kind, ``kv.inventory`` for a bucket."""
    major: int
    address: str
    """The NATS subject, with ``{node}``/``{key}`` parameters (AsyncAPI channel address)."""
    parameters: tuple[tuple[str, str], ...]
    """Parameter name -> what it holds, in address order."""
    content_type: str
    summary: str
    schema: JsonSchema

    @property
    def key(self) -> str:
        """``allocation.decided.v1``: the message's name in the document and its schema file's stem."""
        return f"{self.name}.v{self.major}"


def schema_file_name(message: Message) -> str:
    return f"{message.key}.json"


def schema_id(name: str, major: int) -> str:
    return f"urn:gpubus:schema:{name}:v{major}"


def event_message(cls: type[Event]) -> Message:
    envelope: dict[str, JsonSchema] = {
        "kind": {"description": "The event kind; the subject's second and third tokens.", "const": cls.KIND},
        "v": {"description": "Major version of this kind (consumers skip majors they do not know).",
              "type": "integer", "const": cls.VERSION},
    }
    return Message(
        name=cls.KIND, major=cls.VERSION,
        address=f"{SUBJECT_ROOT}.{cls.KIND}.{{node}}",
        parameters=(("node", NODE_PARAMETER),),
        content_type=MSGPACK, summary=class_doc(cls),
        schema=dataclass_schema(cls, schema_id=schema_id(cls.KIND, cls.VERSION), envelope=envelope),
    )


def kv_messages() -> list[Message]:
    """The three buckets: inventory and allocations hold msgpack maps, locks the holder's id."""
    lock_schema: JsonSchema = {
        "$schema": DIALECT, "$id": schema_id(f"kv.{LOCKS}", LOCK_ENTRY_MAJOR), "title": "LockHolder",
        "description": "The lease holder's id as UTF-8 text (the bucket's TTL is the lease).",
        "type": "string",
    }
    return [
        Message(name=f"kv.{INVENTORY}", major=Inventory.VERSION, address=f"$KV.{INVENTORY}.{{node}}",
                parameters=(("node", "The node's name (the key is the name as Kubernetes spells it)."),),
                content_type=MSGPACK,
                summary="A node's full inventory: the inventory.snapshot event without kind and v.",
                schema=dataclass_schema(Inventory,
                                        schema_id=schema_id(f"kv.{INVENTORY}", Inventory.VERSION))),
        Message(name=f"kv.{ALLOCATIONS}", major=ALLOCATION_ENTRY_MAJOR,
                address=f"$KV.{ALLOCATIONS}.{{pod_uid}}",
                parameters=(("pod_uid", "The pod's UID: the ledger is keyed by pod. One key is not a "
                                        "pod's: term.scheduler, whose revision is the scheduler "
                                        "leader's term, on which every DECIDED entry is fenced "
                                        "(its value: the leader replica's name)."),),
                content_type=MSGPACK, summary=class_doc(Allocation),
                schema=dataclass_schema(Allocation,
                                        schema_id=schema_id(f"kv.{ALLOCATIONS}", ALLOCATION_ENTRY_MAJOR))),
        Message(name=f"kv.{LOCKS}", major=LOCK_ENTRY_MAJOR, address=f"$KV.{LOCKS}.{{lease}}",
                parameters=(("lease", "leader.scheduler (the scheduler's leader lease); the Allocate "
                                      "ambiguity leases alloc.<node>.<n> are gone since issue 32."),),
                content_type="text/plain", summary="Leases: who holds each (a TTL bucket).",
                schema=lock_schema),
    ]


def messages() -> list[Message]:
    """Every published message, events first (by kind), then the KV buckets."""
    events = [event_message(cls) for _, cls in sorted(CATALOGUE.items())]
    return events + kv_messages()


def contract() -> dict[str, Any]:
    """The comparable form: ``<name>.v<major>`` -> name, major, address, schema (what the
    compatibility check reads, and what ``docs/events/published.json`` stores)."""
    return {m.key: {"name": m.name, "major": m.major, "address": m.address, "schema": m.schema}
            for m in messages()}


def asyncapi(version: str, schema_dir: str = "schemas") -> dict[str, Any]:
    """The AsyncAPI 3.0 document; each payload is a ``$ref`` to ``<schema_dir>/<key>.json``."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    components: dict[str, Any] = {}
    for m in messages():
        channel = m.name
        channels[channel] = {
            "address": m.address,
            "title": m.name,
            "description": _channel_description(m),
            "parameters": {name: {"description": text} for name, text in m.parameters},
            "messages": {m.key: {"$ref": f"#/components/messages/{m.key}"}},
        }
        operations[f"receive.{m.name}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{channel}"},
            "summary": f"Follow {m.name} with {'a KV watch' if m.name.startswith('kv.') else 'a consumer'}.",
            "messages": [{"$ref": f"#/channels/{channel}/messages/{m.key}"}],
        }
        message: dict[str, Any] = {
            "name": m.name, "title": f"{m.name} v{m.major}", "contentType": m.content_type,
            "payload": {"$ref": f"{schema_dir}/{m.key}.json"},
        }
        if m.summary:
            message["summary"] = m.summary
        if not m.name.startswith("kv."):
            message["headers"] = {"type": "object", "properties": {"Nats-Msg-Id": {
                "type": "string", "description": "The event's id: JetStream drops a repeat."}}}
        components[m.key] = message
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "gpubus events",
            "version": version,
            "description": (
                f"Every decision gpubus makes, published on NATS JetStream stream {STREAM} (subjects "
                f"{SUBJECT_ROOT}.<family>.<verb>.<node>, msgpack maps), and the current state in KV buckets "
                f"{INVENTORY}, {ALLOCATIONS} and {LOCKS}. Compatibility policy: docs/events.md."),
        },
        "defaultContentType": MSGPACK,
        "servers": {"nats": {"host": "localhost:4222", "protocol": "nats",
                             "description": "Any gpubus NATS server (JetStream enabled)."}},
        "channels": channels,
        "operations": operations,
        "components": {"messages": components},
    }


def _channel_description(m: Message) -> str:
    if m.name.startswith("kv."):
        bucket = m.name.removeprefix("kv.")
        return f"KV bucket {bucket} (stream KV_{bucket}): the latest value per key; a delete is a tombstone."
    return f"Stored in JetStream stream {STREAM}; replay with a start time or sequence."
