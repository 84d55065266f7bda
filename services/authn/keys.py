"""The callout's issuer account key: made once, kept in a file or a Kubernetes Secret.

The Secret holds ``issuer.seed`` (read by ``gpubus authn``) and ``issuer.pub`` (read by nats-server
as ``auth_callout.issuer``); an existing one is kept as it is, so a reinstall or upgrade never
rotates the key under running servers. Prints nothing secret.
"""

from __future__ import annotations

import base64
from pathlib import Path

from services.authn import nkeyjwt
from shared.kube import KubeClient

SEED_KEY = "issuer.seed"
PUBLIC_KEY = "issuer.pub"


def write_seed(path: str) -> str:
    """A new issuer key in ``path`` (mode 0600, refused if it exists); returns its public key."""
    signer = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_ACCOUNT)
    target = Path(path)
    with target.open("xb") as f:  # never overwrite a key servers already trust
        target.chmod(0o600)
        f.write(signer.seed)
    return signer.public_key


async def ensure_secret(name: str, namespace: str, kubeconfig: str | None) -> str:
    """The issuer key in Secret ``namespace/name``, made when missing; returns its public key."""
    kube = await (KubeClient.from_kubeconfig(kubeconfig) if kubeconfig else KubeClient.in_cluster())
    try:
        existing = await kube.get_secret(namespace, name)
        if existing is not None and PUBLIC_KEY in existing.get("data", {}):
            return base64.b64decode(existing["data"][PUBLIC_KEY]).decode()
        signer = nkeyjwt.Signer.generate(nkeyjwt.PREFIX_ACCOUNT)
        data = {SEED_KEY: signer.seed, PUBLIC_KEY: signer.public_key.encode()}
        labels = {"app.kubernetes.io/name": "gpubus", "app.kubernetes.io/component": "authn"}
        await kube.create_secret(namespace, name, data, labels=labels)
        return signer.public_key
    finally:
        await kube.close()
