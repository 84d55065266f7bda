"""Where a ``gpubus up`` stack's simulated hosts keep their short-lived per-pod files: memory first.

The nodes process puts the hosts' plugin and pod-resources sockets and HAMi-core's per-container cache
directories there, and the stack the kubelets' container logs, which the API server reads. Knows
nothing of what runs in the stack.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def host_scratch_root(candidates: tuple[str, ...] = ("/dev/shm", "/tmp")) -> str:
    """Where the simulated hosts' files go: their plugin and pod-resources sockets and HAMi-core's
    per-container cache directories (one made at Allocate and removed at release, per pod).

    Memory first (``/dev/shm``), then ``/tmp``: scratch that dies with the process needs no disk,
    and a directory made and removed on a journalled disk cost ~85 us each way here against ~2 us in
    memory. Both are short paths, which unix socket addresses need (108 bytes at most)."""
    for root in candidates:
        if os.path.isdir(root) and os.access(root, os.W_OK | os.X_OK):
            return root
    return tempfile.gettempdir()


def _scratch_for(data_dir: Path, what: str) -> Path:
    """``<scratch root>/gpubus-<what>-<digest of the data dir>``: the next stack there finds it again."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return Path(host_scratch_root()) / f"gpubus-{what}-{digest}"


def hosts_dir(data_dir: Path) -> Path:
    """The simulated hosts' sockets and files when the node-agents run in a process of their own
    (both processes need the same path; the stack removes it at stop)."""
    return _scratch_for(data_dir, "hosts")


def pod_log_dir(data_dir: Path) -> Path:
    """The kubelets' container logs (a node's ``/var/log/pods``) of the stack on ``data_dir``.

    In the scratch root, for the same reason: every pod's log is two new directories, which cost
    150-250 us of CPU per pod on a journalled disk here and ~30 us in memory (``bench/e2e.py``: the
    nodes process, 4.2 ms per pod without logs, took 4.5-4.6 on disk). They live as long as the pods,
    which the API server stand-in keeps in memory. Named after the data dir, so that the next stack
    there clears what a killed one left."""
    return _scratch_for(data_dir, "pod-logs")
