"""The shared options of the service commands (:mod:`shared.cli_options`), on a command of our own.

Cases: every shared flag (and the ``--nats`` alias, ``--no-log-json``) reaches :class:`CommonOptions`;
nothing given is ``None`` throughout, so env and file settings show through; the command's own
options come first in ``--help`` and ``--kubeconfig`` says what the service uses it for; a
command's parameters and the shared values become one settings-overrides mapping, renamed where
the flag is shorter; the ``--nats*`` values become the bus settings, over ``GPUBUS_BUS_*``.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner

from shared.cli_options import CommonOptions, common_options

seen: list[tuple[dict[str, Any], CommonOptions]] = []


@common_options("for reading widgets")
def serve(*, lease_ttl: Annotated[float | None, typer.Option()] = None, common: CommonOptions) -> None:
    """A service command."""
    seen.append((common.settings_overrides(locals(), lease_ttl="lease_ttl_s"), common))


def invoke(*args: str) -> tuple[dict[str, Any], CommonOptions]:
    app = typer.Typer()
    app.command("serve")(serve)
    app.command("other")(lambda: None)  # two commands: "serve" stays a subcommand
    seen.clear()
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 0, result.output
    [got] = seen
    return got


def test_every_shared_flag_reaches_the_common_options() -> None:
    _, common = invoke(
        "--kubeconfig", "kc", "--in-cluster", "--nats", "nats://n:4222", "--nats-creds", "u.creds",
        "--nats-tls-ca", "ca.pem", "--config", "s.yaml", "--log-level", "debug", "--log-json",
    )
    assert common == CommonOptions(
        kubeconfig="kc", in_cluster=True, nats_url="nats://n:4222", nats_creds="u.creds",
        nats_tls_ca="ca.pem", config="s.yaml", log_level="debug", log_json=True,
    )
    assert invoke("--nats-url", "nats://m:4222", "--no-log-json")[1].log_json is False


def test_flags_not_given_are_none_so_env_and_file_show_through() -> None:
    overrides, common = invoke()
    assert common == CommonOptions()
    assert overrides == dict.fromkeys(("lease_ttl_s", "kubeconfig", "in_cluster", "log_level", "log_json"))


def test_own_parameters_and_shared_fields_become_settings_overrides() -> None:
    overrides, _ = invoke("--lease-ttl", "2.5", "--kubeconfig", "kc", "--log-level", "warning")
    assert overrides == {
        "lease_ttl_s": 2.5, "kubeconfig": "kc", "in_cluster": None, "log_level": "warning", "log_json": None,
    }


def test_help_lists_own_options_first_and_says_what_the_kubeconfig_is_for() -> None:
    app = typer.Typer()
    app.command("serve")(serve)
    text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    assert text.index("--lease-ttl") < text.index("--kubeconfig") < text.index("--log-json")
    assert "Kubeconfig for reading widgets." in text and "--nats-url,--nats" in text


def test_nats_flags_become_bus_settings_over_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUBUS_BUS_URL", "nats://from-env:4222")
    monkeypatch.setenv("GPUBUS_BUS_TLS_CA", "env-ca.pem")
    bus = CommonOptions(nats_creds="u.creds", nats_tls_ca="ca.pem").bus("gpubus-test")
    assert (bus.url, bus.creds_file, bus.tls_ca, bus.name) == (
        "nats://from-env:4222", "u.creds", "ca.pem", "gpubus-test"
    )
