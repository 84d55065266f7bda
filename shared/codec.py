"""Event codec: frozen dataclasses <-> msgpack bytes.

Decoding is strict about what it needs and lenient about what it does not: unknown
fields are ignored (old consumers survive new producers), an unknown kind or a newer
major version is refused, and any malformed body raises :class:`EventDecodeError`,
never anything else. Units never change here; events carry MiB and % as the model does.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union, get_args, get_origin

import msgpack

from shared.errors import EventDecodeError
from shared.events import CATALOGUE, Event

#: Refuse bodies larger than this (bytes) before unpacking them.
MAX_EVENT_BYTES = 1 << 20
#: The largest int a field may hold (int64: what every consumer, Go's included, can store).
INT_MAX = (1 << 63) - 1

T = TypeVar("T")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_SCALARS = (str, int, float, bool, type(None))


def to_wire(value: Any) -> Any:
    """A dataclass tree as plain dicts/lists (msgpack and JSON friendly)."""
    cls = type(value)
    if cls in _SCALARS:
        return value
    names = _FIELD_NAMES.get(cls)
    if names is None and dataclasses.is_dataclass(cls):
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    if names is not None:
        return {name: to_wire(getattr(value, name)) for name in names}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    return value


def encode(event: Event) -> bytes:
    """msgpack bytes with ``kind`` and ``v`` beside the event's own fields."""
    body = to_wire(event)
    body["kind"] = event.KIND
    body["v"] = event.VERSION
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


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
        raise EventDecodeError(
            f"{kind}: unsupported major version {version} (this build knows {cls.VERSION})"
        )
    return from_wire(cls, body)


def from_wire(cls: type[T], body: Any, where: str = "") -> T:
    """Build dataclass ``cls`` from a plain map, converting nested values by type hints."""
    try:
        return typing.cast(T, _converter_for(cls)(body))
    except _FieldError as e:
        raise EventDecodeError(f"{where or cls.__name__}{e.path}: {e.problem}") from None


class _FieldError(Exception):
    """Raised inside converters; the path is built only on the error path, never per field."""

    def __init__(self, problem: str, path: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.path = path

    def under(self, segment: str) -> _FieldError:
        self.path = segment + self.path
        return self


_Converter = Callable[[Any], Any]
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
        return lambda v: v
    if tp in (str, int, float, bool):
        return _scalar_converter(tp)
    raise TypeError(f"codec cannot convert type {tp!r}")


def _scalar_converter(tp: type) -> _Converter:
    if tp is int:
        return _int
    if tp is float:
        return _float

    def conv(v: Any) -> Any:
        if type(v) is tp:
            return v
        if not isinstance(v, tp):
            raise _FieldError(f"expected {tp.__name__}, got {type(v).__name__}")
        return v

    return conv


def _int(v: Any) -> int:
    """Every int an event carries is a count, an index, MiB, % or bytes: 0 <= v < 2**63."""
    if type(v) is not int:
        raise _FieldError(f"expected int, got {type(v).__name__}")
    if not 0 <= v <= INT_MAX:
        raise _FieldError(f"{v} is out of range (0 to 2**63-1)")
    return v


def _float(v: Any) -> float:
    """Every float an event carries is a unix time, a duration or a ratio: finite and >= 0."""
    if type(v) is int:
        return float(_int(v))
    if type(v) is not float:
        raise _FieldError(f"expected float, got {type(v).__name__}")
    if not 0.0 <= v < math.inf:  # False for NaN too
        raise _FieldError(f"{v!r} is not a finite number >= 0")
    return v


def _enum_converter(tp: type[enum.Enum]) -> _Converter:
    def conv(v: Any) -> Any:
        try:
            return tp(v)
        except ValueError:
            raise _FieldError(f"{v!r} is not a valid {tp.__name__}") from None

    return conv


def _union_converter(args: tuple[Any, ...]) -> _Converter:
    non_none = [a for a in args if a is not type(None)]
    if len(non_none) != 1:
        raise TypeError(f"codec supports only Optional unions, got {args!r}")
    inner = _converter_for(non_none[0])

    def conv(v: Any) -> Any:
        return None if v is None else inner(v)

    return conv


def _tuple_converter(args: tuple[Any, ...]) -> _Converter:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _converter_for(args[0])

        def conv(v: Any) -> Any:
            if not isinstance(v, list | tuple):
                raise _FieldError(f"expected a list, got {type(v).__name__}")
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(item(x))
                except _FieldError as e:
                    raise e.under(f"[{i}]") from None
            return tuple(out)

        return conv
    items = [_converter_for(a) for a in args]

    def conv_fixed(v: Any) -> Any:
        if not isinstance(v, list | tuple) or len(v) != len(items):
            raise _FieldError(f"expected a list of {len(items)}")
        out = []
        for i, (c, x) in enumerate(zip(items, v, strict=True)):
            try:
                out.append(c(x))
            except _FieldError as e:
                raise e.under(f"[{i}]") from None
        return tuple(out)

    return conv_fixed


def _dict_converter(args: tuple[Any, ...]) -> _Converter:
    key = _converter_for(args[0])
    value = _converter_for(args[1])

    def conv(v: Any) -> Any:
        if not isinstance(v, dict):
            raise _FieldError(f"expected a map, got {type(v).__name__}")
        out = {}
        for k, x in v.items():
            try:
                out[key(k)] = value(x)
            except _FieldError as e:
                raise e.under(f".{k}") from None
        return out

    return conv


def _dataclass_converter(cls: type) -> _Converter:
    hints = typing.get_type_hints(cls)
    fields = [
        (f.name, _converter_for(hints[f.name]),
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
    ]

    def conv(v: Any) -> Any:
        if not isinstance(v, dict):
            raise _FieldError(f"expected a map, got {type(v).__name__}")
        kwargs: dict[str, Any] = {}
        for name, field_conv, required in fields:
            if name in v:
                try:
                    kwargs[name] = field_conv(v[name])
                except _FieldError as e:
                    raise e.under(f".{name}") from None
            elif required:
                raise _FieldError(f"missing field {name!r}")
        return cls(**kwargs)

    return conv
