"""The event stream's published contract: JSON Schema per event kind and major, the AsyncAPI
document of the ``GPUBUS`` stream and the KV buckets, and the compatibility check between a
published contract and the one the code defines now.

Everything here is derived from the event dataclasses (:mod:`shared.events`) and the KV entry
types; nothing is written by hand. Pure: no I/O (the ``gpubus schema`` command writes the files).
"""

from shared.contract.compat import Break, breaks
from shared.contract.document import Message, asyncapi, contract, messages, schema_file_name
from shared.contract.jsonschema import dataclass_schema

__all__ = [
    "Break",
    "Message",
    "asyncapi",
    "breaks",
    "contract",
    "dataclass_schema",
    "messages",
    "schema_file_name",
]
