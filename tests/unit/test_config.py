"""Settings precedence and coercion: CLI beats env beats file; bad values are named errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.config import SettingsError, load_settings


@dataclass(frozen=True, slots=True, kw_only=True)
class Example:
    port: int = 8080
    """TCP port."""
    debug: bool = False
    name: str = "gpubus"
    ratio: float = 1.0
    tags: tuple[str, ...] = ()
    cert: Path | None = None


def test_defaults_apply_when_nothing_is_given() -> None:
    assert load_settings(Example, environ={}) == Example()


def test_cli_beats_env_beats_file(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("port: 1\nname: from-file\ndebug: true\n")
    env = {"X_PORT": "2", "X_NAME": "from-env"}
    s = load_settings(Example, cli={"port": 3, "name": None}, env_prefix="X_", file=f, environ=env)
    assert (s.port, s.name, s.debug) == (3, "from-env", True)


def test_env_values_are_coerced_to_field_types() -> None:
    env = {"X_DEBUG": "yes", "X_RATIO": "2.5", "X_TAGS": "a, b,,c", "X_CERT": "/tmp/c.pem"}
    s = load_settings(Example, env_prefix="X_", environ=env)
    assert s.debug is True
    assert s.ratio == 2.5
    assert s.tags == ("a", "b", "c")
    assert s.cert == Path("/tmp/c.pem")


def test_file_keys_may_use_dashes(tmp_path: Path) -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Dashed:
        split_count: int = 10

    f = tmp_path / "s.yaml"
    f.write_text("split-count: 4\n")
    assert load_settings(Dashed, file=f, environ={}).split_count == 4


@pytest.mark.parametrize(
    ("env", "field"),
    [({"X_PORT": "eighty"}, "port"), ({"X_DEBUG": "maybe"}, "debug"), ({"X_RATIO": "x"}, "ratio")],
)
def test_bad_values_name_the_setting(env: dict[str, str], field: str) -> None:
    with pytest.raises(SettingsError, match=field):
        load_settings(Example, env_prefix="X_", environ=env)


@pytest.mark.parametrize(
    ("raw", "field", "error"),
    [
        (2.9, "port", "is not a whole number"),
        (True, "port", "is not a whole number"),
        (float("inf"), "port", "is not a whole number"),
        ("1e400", "ratio", "is not a finite number"),
        ("nan", "ratio", "is not a finite number"),
        (float("-inf"), "ratio", "is not a finite number"),
        (10**400, "ratio", "is not a finite number"),
        (False, "ratio", "is not a finite number"),
    ],
    ids=["fraction", "bool-int", "inf-int", "overflow-text", "nan-text", "-inf", "huge-int", "bool-float"],
)
def test_numbers_are_whole_or_finite_never_silently_cut(raw: object, field: str, error: str) -> None:
    with pytest.raises(SettingsError, match=f"setting {field}: .* {error}"):
        load_settings(Example, cli={field: raw}, environ={})


def test_whole_floats_and_numeric_text_are_numbers() -> None:
    s = load_settings(Example, cli={"port": 8081.0, "ratio": "1e3"}, environ={})
    assert (s.port, type(s.port), s.ratio) == (8081, int, 1000.0)


def test_a_scalar_for_a_tuple_setting_is_one_item(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("tags: 5\n")
    assert load_settings(Example, file=f, environ={}).tags == ("5",)


def test_unreadable_or_non_mapping_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(Example, file=tmp_path / "missing.yaml", environ={})
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(SettingsError, match="mapping"):
        load_settings(Example, file=f, environ={})
