"""Field errors as the real API server words them (``k8s.io/apimachinery/pkg/util/validation/field``),
and Go's formatting of the values they show.

A ``FieldError`` is one entry of a ``field.ErrorList``: where (``spec.containers[0].image``), the
``StatusCause`` reason (``FieldValueInvalid``) and the ``ErrorBody`` (``Invalid value: "x": why``).
``ApiError.invalid_fields`` makes the 422 of a list of them, as ``errors.NewInvalid`` does. ``go_quote``
is Go's ``%q`` of a string, ``go_format`` its ``%+v`` of a decoded JSON value. Pure; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

_GO_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v",
               '"': r"\"", "\\": r"\\"}


@dataclass(frozen=True, slots=True)
class FieldError:
    """One of ``field.ErrorList``: where, the ``StatusCause`` reason, and what (``ErrorBody``)."""

    field: str
    reason: str
    body: str

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"

    def cause(self) -> dict[str, str]:
        """As a ``StatusCause`` of the 422's details."""
        return {"reason": self.reason, "message": self.body, "field": self.field}


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, "FieldValueForbidden", f"Forbidden: {detail}")


def invalid(path: str, value: Any, detail: str) -> FieldError:
    """Shows the value as Go's ``ErrorBody`` does: quoted strings, ``"null"`` for nil, numbers as they are."""
    shown = orjson.dumps("null" if value is None else value).decode()
    return FieldError(path, "FieldValueInvalid", f"Invalid value: {shown}: {detail}")


def invalid_text(path: str, shown: str, detail: str) -> FieldError:
    """``invalid`` of a value already formatted as Go shows it (``go_quote``'d, ``%#v``, ``%+v``)."""
    return FieldError(path, "FieldValueInvalid", f"Invalid value: {shown}: {detail}")


def not_supported(path: str, shown: str, supported: str) -> FieldError:
    """``field.NotSupported``: ``shown`` the value as Go formats it, ``supported`` the quoted list."""
    return FieldError(path, "FieldValueNotSupported",
                      f"Unsupported value: {shown}: supported values: {supported}")


def required(path: str) -> FieldError:
    return FieldError(path, "FieldValueRequired", "Required value")


def aggregate(errors: list[FieldError]) -> str:
    """``ErrorList.ToAggregate().Error()``: one error as it is, several in brackets."""
    return str(errors[0]) if len(errors) == 1 else f"[{', '.join(map(str, errors))}]"


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string: ``"`` and ``\\`` escaped, non-printable characters as escapes."""
    out = ['"']
    for ch in text:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join([*out, '"'])


def go_format(value: Any) -> str:
    """Go's ``%+v`` of a decoded JSON value: ``map[k:v ...]`` with sorted keys, ``[a b]``, bare strings."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_format(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_format(item) for item in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _go_float(value: float) -> str:
    """``%v`` of a float64 (``'g'``, shortest digits): an exponent below 1e-4 and from 1e6 up."""
    if value == 0:
        return "0"
    digits = Decimal(repr(value)).normalize()
    sign, numerals, exponent = digits.as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, numerals))
    point = len(mantissa) + exponent  # digits before the decimal point
    if point - 1 < -4 or point - 1 >= 6:
        fraction = f".{mantissa[1:]}" if len(mantissa) > 1 else ""
        text = f"{mantissa[0]}{fraction}e{point - 1:+03d}"
    elif point <= 0:
        text = "0." + "0" * -point + mantissa
    elif point >= len(mantissa):
        text = mantissa + "0" * (point - len(mantissa))
    else:
        text = f"{mantissa[:point]}.{mantissa[point:]}"
    return ("-" if sign else "") + text
