"""``gpubus authn`` settings: one frozen dataclass, loaded CLI > env ``GPUBUS_AUTHN_*`` > YAML file.

Knows nothing about NATS or Kubernetes beyond their settings; the issuer seed is a file path,
never the seed itself, so it never lands in a log or ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.config import SettingsError

ENV_PREFIX = "GPUBUS_AUTHN_"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthnSettings:
    """The auth callout service."""

    issuer_seed_file: str = ""
    """File holding the issuer account's nkey seed (``SA...``); nats-server's ``auth_callout.issuer``
    is its public key. Required."""
    account: str = "GPUBUS"
    """The NATS account node identities are placed in (where the stream and buckets live)."""
    audience: str = "gpubus-nats"
    """The audience node tokens must be bound to (the projected token's ``audience``)."""
    service_accounts: tuple[str, ...] = ("gpubus-system:gpubus-node",)
    """``namespace:name`` of the service accounts whose pods may speak for their node."""
    max_session_s: int = 0
    """When a node's NATS session ends (the user JWT's expiry), seconds after it connects, or with its
    token if sooner; 0 (the default): never. nats-py does not reconnect when the server ends a session
    (it closes the connection for good on that ``-ERR``), so set it only for clients that do."""
    bind: str = "0.0.0.0"
    """Bind address of /healthz, /readyz, /metrics."""
    port: int = 8095
    """Port of /healthz, /readyz, /metrics; 0 picks a free one."""
    kubeconfig: str | None = None
    in_cluster: bool = False
    log_level: str = "info"
    log_json: bool = False

    def __post_init__(self) -> None:
        if not self.issuer_seed_file:
            raise SettingsError("issuer_seed_file is required "
                                "(--issuer-seed-file or GPUBUS_AUTHN_ISSUER_SEED_FILE)")
        if self.max_session_s < 0:
            raise SettingsError("max_session_s must be 0 (no expiry) or positive")
        bad = [sa for sa in self.service_accounts if sa.count(":") != 1 or "" in sa.split(":")]
        if bad:
            raise SettingsError(f"service_accounts must be namespace:name, not {bad}")
