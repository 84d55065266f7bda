"""Kubeconfig files for the local control plane: one per identity, a client certificate or a token."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpubus_local.kube.pki import Pair


def _config(server: str, ca: Path, user: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "gpubus",
        "clusters": [{"name": "gpubus", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "gpubus", "user": user}],
        "contexts": [{"name": "gpubus", "context": {"cluster": "gpubus", "user": "gpubus"}}],
    }


def _write(path: Path, config: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def write_cert_kubeconfig(path: Path, server: str, ca: Path, client: Pair) -> Path:
    """A kubeconfig that authenticates with ``client``'s certificate."""
    return _write(path, _config(server, ca, {"client-certificate": str(client.cert),
                                             "client-key": str(client.key)}))


def write_token_kubeconfig(path: Path, server: str, ca: Path, token: str) -> Path:
    """A kubeconfig that authenticates with a bearer token (a service account's)."""
    return _write(path, _config(server, ca, {"token": token}))
