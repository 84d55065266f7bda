"""Per-node identity in ``gpubus up``: the callout's keys and NATS config, and each node's token.

As on a cluster (``deploy/helm``): nats-server runs in auth-callout mode (``services.authn.serverconf``),
``gpubus authn`` answers it, and every simulated node-agent connects with the projected token of its
own pod (``gpubus-system/gpubus-<node>``, service account ``gpubus-node``, audience ``gpubus-nats``),
which it gets from the API server stand-in with a real TokenRequest, as a kubelet would. Unlike a
cluster, ``gpubus up`` lets a client without credentials in as the role user ``gpubus``
(``no_auth_user``), so ``gpubus tap``, ``submit`` and the other local tools need no password.

Composition only: the keys and files; the node pods and their tokens are the simulator's
(``gpubus_local/sim/node_identity.py``), the protocol lives in ``services/authn``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from services.authn import nkeyjwt, serverconf

NAMESPACE = "gpubus-system"
SERVICE_ACCOUNT = "gpubus-node"
AUDIENCE = "gpubus-nats"
ROLE_USER = "gpubus"
CALLOUT_USER = "authn"
TOKEN_EXPIRATION_S = 365 * 24 * 3600
"""What a kubelet's projected token lives on a cluster that extends them (a year); the sim has no kubelet
to rotate it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CalloutFiles:
    """What ``gpubus up`` writes for the callout (new keys and passwords every start)."""

    nats_conf: Path
    issuer_seed: Path
    callout_password: str

    def __repr__(self) -> str:
        return f"CalloutFiles({self.nats_conf})"


def write_callout_files(directory: Path) -> CalloutFiles:
    """A fresh issuer key and passwords, and the nats-server config that trusts them (mode 0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    issuer = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_ACCOUNT)
    seed = private_file(directory / "issuer.seed", issuer.seed.decode())
    password = secrets.token_urlsafe(16)
    config = serverconf.CalloutConfig(issuer=issuer.public_key, callout_user=CALLOUT_USER,
                                      callout_password=password,
                                      roles={ROLE_USER: secrets.token_urlsafe(16)}, no_auth_user=ROLE_USER)
    conf = private_file(directory / "nats-callout.conf", serverconf.render(config))
    return CalloutFiles(nats_conf=conf, issuer_seed=seed, callout_password=password)


def private_file(path: Path, text: str) -> Path:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)
    return path
