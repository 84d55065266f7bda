"""``gpubus dashboard`` settings and flags: bad values are refused before anything starts (exit 2);
``at`` parsing (unix seconds, ISO 8601 with or without a zone; nonsense is a BadQuery)."""

from __future__ import annotations

import datetime

import pytest
from typer.testing import CliRunner

from gpubus.cli import app
from services.dashboard.app import _reviewer
from services.dashboard.errors import BadQuery
from services.dashboard.server import parse_at
from services.dashboard.settings import DashboardSettings
from shared.config import SettingsError
from shared.errors import BadInput


@pytest.mark.parametrize("bad", [{"push_interval_s": 0.0}, {"checkpoint_interval_s": -1.0}, {"feed_size": 0},
                                 {"history_s": -5.0}, {"max_streams": 0}, {"trend_step_s": 0.0},
                                 {"finished_retention_s": -1.0}, {"idle_after_s": -1.0}])
def test_settings_refuse_values_that_cannot_work(bad: dict[str, float]) -> None:
    with pytest.raises(SettingsError):
        DashboardSettings(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("args", [["--push-interval", "0"], ["--port", "many"], ["--history", "nan"],
                                  ["--trend-step", "0"], ["--finished-retention", "-1"],
                                  ["--idle-after", "x"]])
def test_a_bad_flag_is_a_usage_error_before_anything_starts(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["dashboard", "--nats", "nats://127.0.0.1:1", *args])
    assert result.exit_code == 2, result.output


async def test_the_dashboard_uses_kubernetes_only_to_review_tokens() -> None:
    """It reads NATS only: a kubeconfig is opened for ``--auth kubernetes`` and nothing else."""
    assert await _reviewer(DashboardSettings(kubeconfig="/nonexistent")) is None
    with pytest.raises(BadInput, match="give none or kubernetes"):
        await _reviewer(DashboardSettings(auth="basic"))
    with pytest.raises(BadInput, match="needs --kubeconfig or --in-cluster"):
        await _reviewer(DashboardSettings(auth="kubernetes"))


@pytest.mark.parametrize(("raw", "expected"), [
    ("1700000000.5", 1700000000.5),
    ("2026-12-04T15:00:00", datetime.datetime(2026, 12, 4, 15, tzinfo=datetime.UTC).timestamp()),
    ("2026-12-04T16:00:00+01:00", datetime.datetime(2026, 12, 4, 15, tzinfo=datetime.UTC).timestamp()),
    ("", None),
    (None, None),
])
def test_at_is_unix_seconds_or_an_iso_time(raw: str | None, expected: float | None) -> None:
    assert parse_at(raw) == expected


@pytest.mark.parametrize("raw", ["yesterday", "nan", "inf", "-5", "0", "2026-13-40"])
def test_an_at_that_is_no_moment_is_a_bad_query(raw: str) -> None:
    with pytest.raises(BadQuery):
        parse_at(raw)
