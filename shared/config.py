"""Settings loading: one frozen dataclass per service, filled with precedence CLI > env > file.

This is the only module that reads ``os.environ``. A settings class documents each field
(unit, default, why) in its docstring; values arrive here as strings (env), YAML scalars
(file) or typed values (CLI) and are coerced to the field's type, with a clear error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from shared.errors import BadInput, clip

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(BadInput):
    """A setting has a value of the wrong type or a settings file is unreadable."""


def load_settings(
    cls: type[T],
    *,
    cli: Mapping[str, Any] | None = None,
    env_prefix: str = "",
    file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """Build ``cls`` from CLI values (None means "not given"), ``<PREFIX><FIELD>`` env vars, then a YAML file.

    Env names are the upper-cased field names with the prefix, e.g. ``GPUBUS_SCHEDULER_HTTP_PORT``.
    """
    env = os.environ if environ is None else environ
    from_file = _read_file(file) if file else {}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw: Any = None
        if cli is not None and cli.get(f.name) is not None:
            raw = cli[f.name]
        elif env_prefix and f"{env_prefix}{f.name.upper()}" in env:
            raw = env[f"{env_prefix}{f.name.upper()}"]
        elif f.name in from_file or f.name.replace("_", "-") in from_file:
            raw = from_file.get(f.name, from_file.get(f.name.replace("_", "-")))
        else:
            continue
        values[f.name] = coerce(raw, hints[f.name], f.name)
    return cls(**values)


def environ_get(name: str, default: str | None = None) -> str | None:
    """Read one environment variable (for the few settings that HAMi reads by fixed names)."""
    return os.environ.get(name, default)


def _read_file(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SettingsError(f"cannot read settings file {path}: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {path} must hold a mapping")
    return data


def coerce(raw: Any, tp: Any, name: str) -> Any:
    """Coerce a CLI/env/file value to the annotated type of a settings field."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if raw is None or (isinstance(raw, str) and raw == "" and type(None) in args):
            return None
        inner = [a for a in args if a is not type(None)]
        return coerce(raw, inner[0], name)
    if origin is tuple:
        items = (
            raw.split(",") if isinstance(raw, str) else list(raw) if isinstance(raw, list | tuple) else [raw]
        )
        return tuple(coerce(x.strip() if isinstance(x, str) else x, args[0], name) for x in items if x != "")
    if tp is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise SettingsError(f"setting {name}: {raw!r} is not a boolean")
    if tp is int:
        return _integer(raw, name)
    if tp is float:
        return _number(raw, name)
    if tp is str:
        return str(raw)
    if isinstance(tp, type) and issubclass(tp, Path):
        return Path(raw)
    return raw


def _integer(raw: Any, name: str) -> int:
    """A whole number: never a bool (YAML ``true``) or a fraction silently cut to an int."""
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            pass
    raise SettingsError(f"setting {name}: {_shown(raw)} is not a whole number")


def _number(raw: Any, name: str) -> float:
    """A finite number: NaN and infinity pass every range check, then break the arithmetic after it."""
    value = math.nan
    if isinstance(raw, (int, float, str)) and not isinstance(raw, bool):
        with contextlib.suppress(ValueError, OverflowError):
            value = float(raw)
    if not math.isfinite(value):
        raise SettingsError(f"setting {name}: {_shown(raw)} is not a finite number")
    return value


def _shown(raw: Any) -> str:
    return clip(repr(raw), 40)
