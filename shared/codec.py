"""Event codec: frozen dataclasses <-> msgpack bytes, through msgspec.

Decoding is strict about what it needs and lenient about what it does not: unknown
fields are ignored (old consumers survive new producers), an unknown kind or a newer
major version is refused, and any malformed body raises :class:`EventDecodeError`,
never anything else. Units never change here; events carry MiB and % as the model does.

Every int an event carries is a count, an index, MiB, % or bytes, and every float a unix
time, a duration or a ratio, so ints must lie in 0..2**63-1 (what every consumer, Go's
included, can store) and floats be finite and >= 0. The model's dataclasses say only ``int``
and ``float``; msgspec checks ranges only on annotated types, so each dataclass gets a
mirror ``Struct`` whose ints and floats carry those bounds: bytes are validated into the
mirror, then turned into the model's own dataclass, both in msgspec's C code.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import msgspec

from shared.errors import EventDecodeError
from shared.events import CATALOGUE, Event

#: Refuse bodies larger than this (bytes) before unpacking them.
MAX_EVENT_BYTES = 1 << 20
#: The largest int a field may hold (int64: what every consumer, Go's included, can store).
INT_MAX = (1 << 63) - 1

T = TypeVar("T")

_INT = Annotated[int, msgspec.Meta(ge=0, le=INT_MAX)]
# NaN fails ge; infinity fails le (msgspec takes only finite bounds)
_FLOAT = Annotated[float, msgspec.Meta(ge=0.0, le=sys.float_info.max)]

_ENCODER = msgspec.msgpack.Encoder()
_MAP = msgspec.msgpack.Decoder(dict[str, Any])
_MIRRORS: dict[Any, Any] = {}
_DECODERS: dict[type, msgspec.msgpack.Decoder[Any]] = {}


def to_wire(value: Any) -> Any:
    """A dataclass tree as plain dicts/lists (msgpack and JSON friendly); enums as their values."""
    return msgspec.msgpack.decode(_ENCODER.encode(value))


def pack(value: Any) -> bytes:
    """A dataclass tree as msgpack bytes, no envelope (KV entries); :func:`decode_as` reads it."""
    return _ENCODER.encode(value)


def encode(event: Event) -> bytes:
    """msgpack bytes with ``kind`` and ``v`` beside the event's own fields."""
    body = msgspec.to_builtins(event)
    body["kind"] = event.KIND
    body["v"] = event.VERSION
    return _ENCODER.encode(body)


def decode(data: bytes, max_bytes: int = MAX_EVENT_BYTES) -> Event:
    """Bytes -> the event they describe, or :class:`EventDecodeError` saying why not."""
    if len(data) > max_bytes:
        raise EventDecodeError(f"event body of {len(data)} bytes exceeds the {max_bytes} byte limit")
    try:
        body = _MAP.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise EventDecodeError(f"event body is not valid msgpack: {e}") from e
    return decode_body(body)


def decode_body(body: Any) -> Event:
    """A decoded map (msgpack or JSON) -> its event class, validating every field."""
    if not isinstance(body, dict):
        raise EventDecodeError(f"event body must be a map, got {type(body).__name__}")
    kind = body.get("kind")
    cls = CATALOGUE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventDecodeError(f"unknown event kind {kind!r}")
    version = body.get("v")
    if not isinstance(version, int) or isinstance(version, bool):
        raise EventDecodeError(f"{kind}: missing or invalid version {version!r}")
    if version > cls.VERSION or version < 1:
        raise EventDecodeError(
            f"{kind}: unsupported major version {version} (this build knows {cls.VERSION})"
        )
    return from_wire(cls, body)


def from_wire(cls: type[T], body: Any, where: str = "") -> T:
    """Build dataclass ``cls`` from a plain map, checking every field's type and range."""
    try:
        return msgspec.convert(msgspec.convert(body, _mirror(cls)), cls, from_attributes=True)
    except msgspec.ValidationError as e:
        raise _refused(e, where or cls.__name__) from None


def decode_as(cls: type[T], data: bytes, where: str) -> T:
    """msgpack bytes straight to dataclass ``cls`` (no event envelope): KV entries."""
    decoder = _DECODERS.get(cls)
    if decoder is None:
        decoder = _DECODERS[cls] = msgspec.msgpack.Decoder(_mirror(cls))
    try:
        mirror = decoder.decode(data)
    except msgspec.ValidationError as e:
        raise _refused(e, where) from None
    except msgspec.DecodeError as e:
        raise EventDecodeError(f"{where} is not valid msgpack: {e}") from e
    return msgspec.convert(mirror, cls, from_attributes=True)


#: msgspec's words for a bound of :data:`_INT` or :data:`_FLOAT`, in the model's terms.
_BOUNDS = {
    "Expected `int` >= 0": "out of range (0 to 2**63-1)",
    f"Expected `int` <= {INT_MAX}": "out of range (0 to 2**63-1)",
    "Expected `float` >= 0.0": "not a finite number >= 0",
    f"Expected `float` <= {sys.float_info.max!r}": "not a finite number >= 0",
}


def _refused(e: msgspec.ValidationError, where: str) -> EventDecodeError:
    """msgspec's ``Expected `int`, got `str` - at `$.a.b``` as ``where.a.b: expected int, got str``."""
    problem, _, path = str(e).partition(" - at `$")
    missing = problem.removeprefix("Object missing required field ")
    if missing != problem:
        problem = f"missing field '{missing.strip('`')}'"
    # the same words whether msgspec read bytes (``null``) or a Python map (``None``)
    problem = _BOUNDS.get(problem) or problem.replace("`None`", "null").replace("`", "")
    return EventDecodeError(f"{where}{path.rstrip('`')}: {problem[:1].lower()}{problem[1:]}")


def _mirror(tp: Any) -> Any:
    """``tp`` with every int and float bounded, and every dataclass a Struct of the same fields."""
    while hasattr(tp, "__supertype__"):  # NewType
        tp = tp.__supertype__
    if tp is int:
        return _INT
    if tp is float:
        return _FLOAT
    if dataclasses.is_dataclass(tp):
        mirror = _MIRRORS.get(tp)
        if mirror is None:
            mirror = _MIRRORS[tp] = _mirror_struct(typing.cast(type, tp))
        return mirror
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return Union[tuple(_mirror(a) for a in get_args(tp))]  # noqa: UP007 (built at run time)
    if origin is tuple:
        return tuple[tuple(a if a is Ellipsis else _mirror(a) for a in get_args(tp))]  # type: ignore[misc]
    if origin is dict:
        key, value = get_args(tp)
        return dict[_mirror(key), _mirror(value)]  # type: ignore[misc]
    return tp


def _mirror_struct(cls: type) -> type[msgspec.Struct]:
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        tp = _mirror(hints[f.name])
        if f.default is not dataclasses.MISSING:
            fields.append((f.name, tp, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, tp, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, tp))
    return msgspec.defstruct(cls.__name__, fields, kw_only=True)
