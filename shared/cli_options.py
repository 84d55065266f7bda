"""The command line every ``gpubus <service>`` shares: common options, their settings, the loop.

The ``--nats-url``/``--nats``, ``--nats-creds``, ``--nats-tls-ca``, ``--nats-replicas``, ``--config``,
``--log-level``, ``--log-json``, ``--kubeconfig`` and ``--in-cluster`` options are declared here once, as
``Annotated`` aliases. A service command decorated with :func:`common_options` takes them all as
one ``common: CommonOptions`` parameter, which knows how they become settings: the fields every
service has (:meth:`CommonOptions.settings_overrides`) and the bus (:meth:`CommonOptions.bus`,
env ``GPUBUS_BUS_*`` under the flags). ``None`` always means "not given", so env and file
settings show through. This module must not know any service's own options or settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from shared.bus import BusSettings
from shared.errors import BadInput, GpubusError
from shared.lifetime import Lifetime, run_until_stopped
from shared.service import load_bus_settings

Command = Callable[..., None]

NatsUrl = Annotated[
    str | None, typer.Option("--nats-url", "--nats", help="NATS URL(s) (env GPUBUS_BUS_URL).")
]
NatsCreds = Annotated[str | None, typer.Option("--nats-creds", help="NATS .creds file.")]
NatsReplicas = Annotated[int | None, typer.Option(
    "--nats-replicas", help="Copies of the event stream and KV buckets, 1..5 (env GPUBUS_BUS_REPLICAS; "
                            "3 on a 3-server NATS cluster).")]
NatsTlsCa = Annotated[
    str | None, typer.Option("--nats-tls-ca", help="CA bundle of the NATS server (enables TLS).")
]
ConfigFile = Annotated[str | None, typer.Option("--config", help="YAML settings file.")]
LogLevel = Annotated[str | None, typer.Option("--log-level", help="debug, info, warning, error.")]
LogJson = Annotated[bool | None, typer.Option("--log-json/--no-log-json", help="JSON log lines.")]
InCluster = Annotated[bool | None, typer.Option("--in-cluster", help="Use the pod's service account.")]


def kubeconfig_option(purpose: str = "of the cluster") -> Any:
    """``--kubeconfig`` for ``Annotated[str | None, ...]``, its help saying what the service uses it for."""
    return typer.Option("--kubeconfig", help=f"Kubeconfig {purpose}.")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommonOptions:
    """The shared options of one invocation; ``None`` = not given on the command line."""

    kubeconfig: str | None = None
    """``--kubeconfig``: the settings field ``kubeconfig``."""
    in_cluster: bool | None = None
    """``--in-cluster``: the settings field ``in_cluster``."""
    nats_url: str | None = None
    """``--nats-url``/``--nats``: ``BusSettings.url``."""
    nats_creds: str | None = None
    """``--nats-creds``: ``BusSettings.creds_file``."""
    nats_tls_ca: str | None = None
    """``--nats-tls-ca``: ``BusSettings.tls_ca``."""
    nats_replicas: int | None = None
    """``--nats-replicas``: ``BusSettings.replicas``."""
    config: str | None = None
    """``--config``: the YAML settings file under env and flags (``load_settings(file=...)``)."""
    log_level: str | None = None
    """``--log-level``: the settings field ``log_level``."""
    log_json: bool | None = None
    """``--log-json``/``--no-log-json``: the settings field ``log_json``."""

    def settings_overrides(self, params: Mapping[str, Any], **renames: str) -> dict[str, Any]:
        """The CLI layer of ``load_settings``: a command's own parameters (its ``locals()``) and ours.

        ``renames`` maps a parameter to its field where the flag is shorter (``lease_ttl`` ->
        ``lease_ttl_s``).
        """
        own = {renames.get(name, name): value for name, value in params.items() if name != "common"}
        return own | {
            "kubeconfig": self.kubeconfig,
            "in_cluster": self.in_cluster,
            "log_level": self.log_level,
            "log_json": self.log_json,
        }

    def bus(self, name: str) -> BusSettings:
        """BusSettings from ``--nats-url``, ``--nats-creds``, ``--nats-tls-ca``, ``--nats-replicas`` over
        ``GPUBUS_BUS_*``."""
        return load_bus_settings(name, url=self.nats_url, creds_file=self.nats_creds, tls_ca=self.nats_tls_ca,
                                 replicas=self.nats_replicas)


def common_options(kubeconfig_purpose: str = "of the cluster") -> Callable[[Command], Command]:
    """Give a command taking keyword-only options and ``common: CommonOptions`` the shared options.

    ``--help`` shows the command's own options, then ours: typer reads the signature set here,
    and the command gets our values as one :class:`CommonOptions`.
    """
    ours = _parameters(kubeconfig_purpose)

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "common"]

        @functools.wraps(command)
        def with_common(**params: Any) -> None:
            common = CommonOptions(**{p.name: params.pop(p.name) for p in ours})
            command(common=common, **params)

        with_common.__signature__ = signature.replace(parameters=[*own, *ours])  # type: ignore[attr-defined]
        with_common.__annotations__ = {p.name: p.annotation for p in [*own, *ours]} | {"return": None}
        return with_common

    return decorate


def _parameters(kubeconfig_purpose: str) -> list[inspect.Parameter]:
    """The shared options as keyword-only parameters, in the order ``--help`` lists them."""
    aliases: dict[str, Any] = {
        "kubeconfig": Annotated[str | None, kubeconfig_option(kubeconfig_purpose)],
        "in_cluster": InCluster,
        "nats_url": NatsUrl,
        "nats_creds": NatsCreds,
        "nats_tls_ca": NatsTlsCa,
        "nats_replicas": NatsReplicas,
        "config": ConfigFile,
        "log_level": LogLevel,
        "log_json": LogJson,
    }
    keyword = inspect.Parameter.KEYWORD_ONLY
    return [inspect.Parameter(name, keyword, default=None, annotation=a) for name, a in aliases.items()]


@contextlib.contextmanager
def bad_parameters() -> Iterator[None]:
    """Settings that do not load become typer's usage error (exit 2, the message under the usage)."""
    try:
        yield
    except (BadInput, ValueError) as e:
        raise typer.BadParameter(str(e)) from e


def run_service(command: str, run: Callable[[Lifetime], Coroutine[Any, Any, None]]) -> None:
    """The one way every service process runs: ``run(lifetime)`` until SIGTERM/SIGINT (it drains, exit
    0) or a fatal error, printed as ``<command>: <message>``: bad input (settings, files) exits 2, any
    other :class:`GpubusError`, a root task that died included (:mod:`shared.lifetime`), exits 1."""
    try:
        _run_loop(run_until_stopped(run))
    except BadInput as e:
        typer.echo(f"{command}: {e}", err=True)
        raise typer.Exit(2) from e
    except GpubusError as e:
        typer.echo(f"{command}: {e}", err=True)
        raise typer.Exit(1) from e


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop where installed (it trims the tail latency of /filter and admission), asyncio otherwise."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)
