"""The dashboard's pages have no login of their own: standalone it listens on loopback unless told
otherwise (``--bind``), and its help says so."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from services.dashboard import cli
from services.dashboard.settings import DashboardSettings
from shared.config import load_settings


def test_the_dashboard_listens_on_loopback_by_default() -> None:
    assert DashboardSettings().bind == "127.0.0.1"
    assert load_settings(DashboardSettings, cli={}, environ={}).bind == "127.0.0.1"


def test_an_explicit_bind_is_honoured() -> None:
    assert load_settings(DashboardSettings, cli={"bind": "0.0.0.0"}, environ={}).bind == "0.0.0.0"


def test_the_help_names_the_loopback_default() -> None:
    app = typer.Typer()
    cli.register(app)
    app.command("noop")(lambda: None)  # two commands: typer keeps the subcommand name
    result = CliRunner().invoke(app, ["dashboard", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "default 127.0.0.1" in result.output
