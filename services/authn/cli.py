"""``gpubus authn``: flags -> settings -> :func:`services.authn.app.run` until SIGTERM.

Only option parsing: every flag maps to an :class:`AuthnSettings` field (env ``GPUBUS_AUTHN_<FIELD>``,
file ``--config``) or to the bus settings (env ``GPUBUS_BUS_*``: the callout's own NATS user).
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from shared.cli_options import CommonOptions, bad_parameters, common_options, run_service
from shared.config import load_settings
from shared.logs import setup_logging

Opt = typer.Option


@common_options("for TokenReview and reading pods")
def authn(
    *,
    issuer_seed_file: Annotated[str | None, Opt(help="Issuer account nkey seed file (SA...).")] = None,
    account: Annotated[str | None, Opt(help="NATS account node identities join (default GPUBUS).")] = None,
    audience: Annotated[str | None, Opt(help="Audience node tokens are bound to (gpubus-nats).")] = None,
    service_account: Annotated[
        list[str] | None, Opt(help="namespace:name whose pods may speak for their node (repeatable).")
    ] = None,
    max_session_s: Annotated[int | None, Opt(help="End a node's NATS session after, seconds (0: never).")]
    = None,
    bind: Annotated[str | None, Opt(help="Listen address of /healthz /readyz /metrics.")] = None,
    port: Annotated[int | None, Opt(help="Port of /healthz /readyz /metrics (8095).")] = None,
    common: CommonOptions,
) -> None:
    """NATS auth callout: lets node-agents and monitors in as their own node only."""
    params = dict(locals())
    accounts = params.pop("service_account")
    cli = common.settings_overrides(params) | {"service_accounts": tuple(accounts) if accounts else None}
    from services.authn.app import run
    from services.authn.settings import ENV_PREFIX, AuthnSettings

    with bad_parameters():
        settings = load_settings(AuthnSettings, cli=cli, env_prefix=ENV_PREFIX, file=common.config)
        bus = common.bus("gpubus-authn")
    setup_logging(settings.log_level, settings.log_json)
    run_service("authn", functools.partial(run, settings, bus))


def authn_keygen(
    seed_file: Annotated[str | None, Opt(help="Write the issuer seed here (mode 0600).")] = None,
    secret: Annotated[str | None, Opt(help="Or keep it in this Kubernetes Secret (made once, kept).")] = None,
    namespace: Annotated[str, Opt(help="Namespace of --secret.")] = "default",
    kubeconfig: Annotated[str | None, Opt(help="Kubeconfig (default: in-cluster).")] = None,
) -> None:
    """Make the callout's issuer account key; print its public key (nats-server's auth_callout.issuer)."""
    import asyncio

    from services.authn.keys import ensure_secret, write_seed

    if (seed_file is None) == (secret is None):
        raise typer.BadParameter("give exactly one of --seed-file and --secret")
    if seed_file is not None:
        try:
            typer.echo(write_seed(seed_file))
        except OSError as e:
            typer.echo(f"authn-keygen: {e} (an existing key is never replaced)", err=True)
            raise typer.Exit(1) from None
        return
    assert secret is not None
    typer.echo(asyncio.run(ensure_secret(secret, namespace, kubeconfig)))


def register(app: typer.Typer) -> None:
    app.command("authn")(authn)
    app.command("authn-keygen")(authn_keygen)
