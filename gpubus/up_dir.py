"""Where a ``gpubus up`` stack leaves what the product's commands need to find it.

``gpubus submit`` and ``gpubus get pods`` read the kubeconfig the stack writes into its data dir.
The local world (``gpubus_local``) writes these files and imports this module; the product reads
them and never imports the local world.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_DATA_DIR = Path.home() / ".gpubus" / "up"
DEFAULT_KUBECONFIG = DEFAULT_DATA_DIR / "kubeconfig"
