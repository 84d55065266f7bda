"""Event codec: frozen dataclasses <-> msgpack bytes.

Decoding is strict about what it needs and lenient about what it does not: unknown
fields are ignored (old consumers survive new producers), an unknown kind or a newer
major version is refused, and any malformed body raises :class:`EventDecodeError`,
never anything else. Units never change here; events carry MiB and % as the model does.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union, get_args, get_origin

import msgpack

from shared.errors import EventDecodeError
from shared.events import CATALOGUE, Event

#: Refuse bodies larger than this (bytes) before unpacking them.
MAX_EVENT_BYTES = 1 << 20

T = TypeVar("T")
_Converter = Callable[[Any, str], Any]


def to_wire(value: Any) -> Any:
    """A dataclass tree as plain dicts/lists (msgpack and JSON friendly)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def encode(event: Event) -> bytes:
    """msgpack bytes with ``kind`` and ``v`` beside the event's own fields."""
    body = to_wire(event)
    body["kind"] = event.KIND
    body["v"] = event.VERSION
    return msgpack.packb(body, use_bin_type=True)


def decode(data: bytes, max_bytes: int = MAX_EVENT_BYTES) -> Event:
    """Bytes -> the event they describe, or :class:`EventDecodeError` saying why not."""
    if len(data) > max_bytes:
        raise EventDecodeError(f"event body of {len(data)} bytes exceeds the {max_bytes} byte limit")
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as e:
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
        raise EventDecodeError(f"{kind}: unsupported major version {version} (this build knows {cls.VERSION})")
    return typing.cast(Event, from_wire(cls, body))


def from_wire(cls: type[T], body: Any, where: str = "") -> T:
    """Build dataclass ``cls`` from a plain map, converting nested values by type hints."""
    return typing.cast(T, _converter_for(cls)(body, where or cls.__name__))


_CACHE: dict[Any, _Converter] = {}


def _converter_for(tp: Any) -> _Converter:
    conv = _CACHE.get(tp)
    if conv is None:
        conv = _build_converter(tp)
        _CACHE[tp] = conv
    return conv


def _build_converter(tp: Any) -> _Converter:
    while hasattr(tp, "__supertype__"):  # NewType
        tp = tp.__supertype__
    if dataclasses.is_dataclass(tp):
        return _dataclass_converter(typing.cast(type, tp))
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union_converter(get_args(tp))
    if origin is tuple:
        return _tuple_converter(get_args(tp))
    if origin is dict:
        return _dict_converter(get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_converter(tp)
    if tp is Any:
        return lambda v, where: v
    if tp in (str, int, float, bool):
        return _scalar_converter(tp)
    raise TypeError(f"codec cannot convert type {tp!r}")


def _scalar_converter(tp: type) -> _Converter:
    def conv(v: Any, where: str) -> Any:
        if tp is float and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if tp is int and isinstance(v, bool):
            raise EventDecodeError(f"{where}: expected int, got bool")
        if not isinstance(v, tp):
            raise EventDecodeError(f"{where}: expected {tp.__name__}, got {type(v).__name__}")
        return v

    return conv


def _enum_converter(tp: type[enum.Enum]) -> _Converter:
    def conv(v: Any, where: str) -> Any:
        try:
            return tp(v)
        except ValueError as e:
            raise EventDecodeError(f"{where}: {v!r} is not a valid {tp.__name__}") from e

    return conv


def _union_converter(args: tuple[Any, ...]) -> _Converter:
    non_none = [a for a in args if a is not type(None)]
    if len(non_none) != 1:
        raise TypeError(f"codec supports only Optional unions, got {args!r}")
    inner = _converter_for(non_none[0])

    def conv(v: Any, where: str) -> Any:
        return None if v is None else inner(v, where)

    return conv


def _tuple_converter(args: tuple[Any, ...]) -> _Converter:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _converter_for(args[0])

        def conv(v: Any, where: str) -> Any:
            if not isinstance(v, list | tuple):
                raise EventDecodeError(f"{where}: expected a list, got {type(v).__name__}")
            return tuple(item(x, f"{where}[{i}]") for i, x in enumerate(v))

        return conv
    items = [_converter_for(a) for a in args]

    def conv_fixed(v: Any, where: str) -> Any:
        if not isinstance(v, list | tuple) or len(v) != len(items):
            raise EventDecodeError(f"{where}: expected a list of {len(items)}")
        return tuple(c(x, f"{where}[{i}]") for i, (c, x) in enumerate(zip(items, v, strict=True)))

    return conv_fixed


def _dict_converter(args: tuple[Any, ...]) -> _Converter:
    key = _converter_for(args[0])
    value = _converter_for(args[1])

    def conv(v: Any, where: str) -> Any:
        if not isinstance(v, dict):
            raise EventDecodeError(f"{where}: expected a map, got {type(v).__name__}")
        return {key(k, where): value(x, f"{where}.{k}") for k, x in v.items()}

    return conv


def _dataclass_converter(cls: type) -> _Converter:
    hints = typing.get_type_hints(cls)
    fields = [
        (f.name, _converter_for(hints[f.name]), f.default is dataclasses.MISSING
         and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
    ]

    def conv(v: Any, where: str) -> Any:
        if not isinstance(v, dict):
            raise EventDecodeError(f"{where}: expected a map, got {type(v).__name__}")
        kwargs: dict[str, Any] = {}
        for name, field_conv, required in fields:
            if name in v:
                kwargs[name] = field_conv(v[name], f"{where}.{name}")
            elif required:
                raise EventDecodeError(f"{where}: missing field {name!r}")
        return cls(**kwargs)

    return conv
