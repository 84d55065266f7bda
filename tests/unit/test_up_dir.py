"""How ``gpubus tap`` and ``gpubus snapshot`` choose their NATS URL, and the record a running
``gpubus up`` leaves in its data dir.

Case matrix: ``--nats`` wins over ``GPUBUS_BUS_URL``, which wins over the recorded URL, which wins over
the default; an empty flag or variable counts as not given; the record is written whole, read back
stripped, gone after ``forget``; a missing, empty or unreadable record is none; each choice names
where it came from (the record: its file).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpubus.up_dir import (
    NATS_URL_FILE,
    NatsUrl,
    choose_nats_url,
    forget_nats_url,
    recorded_nats_url,
    write_nats_url,
)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    write_nats_url(tmp_path, "nats://127.0.0.1:14222")
    return tmp_path


def test_the_flag_wins_then_the_variable_then_the_record(data_dir: Path) -> None:
    env = {"GPUBUS_BUS_URL": "nats://env:4222"}
    assert choose_nats_url("nats://flag:4222", env, data_dir) == NatsUrl("nats://flag:4222", "--nats")
    assert choose_nats_url(None, env, data_dir) == NatsUrl("nats://env:4222", "GPUBUS_BUS_URL")
    chosen = choose_nats_url("", {"GPUBUS_BUS_URL": ""}, data_dir)
    assert chosen.url == "nats://127.0.0.1:14222"
    assert str(data_dir / NATS_URL_FILE) in chosen.source


def test_without_any_the_default_says_how_to_get_one(tmp_path: Path) -> None:
    chosen = choose_nats_url(None, {}, tmp_path / "never-up")
    assert chosen.url == "nats://127.0.0.1:4222"
    assert "start `gpubus up`, or give --nats or GPUBUS_BUS_URL" in chosen.source


def test_the_record_is_gone_after_forget_and_leaves_no_temporary_file(data_dir: Path) -> None:
    assert recorded_nats_url(data_dir) == "nats://127.0.0.1:14222"
    assert sorted(p.name for p in data_dir.iterdir()) == [NATS_URL_FILE]
    forget_nats_url(data_dir)
    forget_nats_url(data_dir)  # a second stop finds nothing to remove
    assert recorded_nats_url(data_dir) is None


def test_an_empty_or_unreadable_record_is_none(tmp_path: Path) -> None:
    (tmp_path / NATS_URL_FILE).write_text(" \n")
    assert recorded_nats_url(tmp_path) is None
    (tmp_path / NATS_URL_FILE).unlink()
    (tmp_path / NATS_URL_FILE).mkdir()  # not a file: reading it fails
    assert recorded_nats_url(tmp_path) is None
