"""Logging setup: JSON lines carry context fields and truncate huge messages; text stays readable."""

from __future__ import annotations

import json
import logging

import pytest

from shared.logs import JsonFormatter, setup_logging


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gpubus.test", logging.WARNING, __file__, 1, msg, (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_json_lines_carry_level_logger_message_and_context() -> None:
    line = JsonFormatter().format(_record("allocate failed", node="n1", pod="ns/p"))
    body = json.loads(line)
    assert body["level"] == "warning"
    assert body["logger"] == "gpubus.test"
    assert body["msg"] == "allocate failed"
    assert (body["node"], body["pod"]) == ("n1", "ns/p")
    assert body["ts"].endswith("Z")


def test_json_messages_are_truncated() -> None:
    body = json.loads(JsonFormatter().format(_record("x" * 10_000)))
    assert len(body["msg"]) == 4096


def test_setup_logging_installs_one_handler_with_the_chosen_format() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("debug", json_logs=True)
        assert len(root.handlers) == 1
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        assert root.level == logging.DEBUG
        setup_logging("info")
        assert not isinstance(root.handlers[0].formatter, JsonFormatter)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError):
        setup_logging("chatty")
