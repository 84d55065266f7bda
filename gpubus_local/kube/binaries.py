"""Where the real control plane's binaries are: built from the Go module proxy by ``scripts/kube-build``.

The build (pinned versions, a cache outside the repo keyed by its inputs) is the script's; this
module only asks it for the directory, building when the cache is cold, or takes
``GPUBUS_KUBE_BIN`` where a user built or installed the binaries elsewhere.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl",
         "helm", "fake-cri")
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kube-build"


class BinariesMissing(RuntimeError):
    """The binaries are neither built nor buildable here."""


@dataclass(frozen=True, slots=True)
class Binaries:
    """The directory holding every binary in :data:`NAMES`."""

    directory: Path

    def __getitem__(self, name: str) -> Path:
        if name not in NAMES:
            raise KeyError(name)
        return self.directory / name

    def missing(self) -> list[str]:
        return [n for n in NAMES if not os.access(self.directory / n, os.X_OK)]


def find_binaries(*, build: bool = True) -> Binaries:
    """``GPUBUS_KUBE_BIN``, else the build script's cache (building it if ``build`` and cold)."""
    env = os.environ.get("GPUBUS_KUBE_BIN")
    if env:
        found = Binaries(Path(env))
    else:
        if not BUILD_SCRIPT.exists():
            raise BinariesMissing(f"no {BUILD_SCRIPT}: set GPUBUS_KUBE_BIN to a directory with "
                                  f"{', '.join(NAMES)}")
        args = [str(BUILD_SCRIPT)] + ([] if build else ["--check"])
        done = subprocess.run(args, stdout=subprocess.PIPE, check=False, text=True)
        if done.returncode != 0:
            raise BinariesMissing("the Kubernetes binaries are not built: run scripts/kube-build "
                                  "(Go 1.26 and the Go module proxy; tens of minutes cold)")
        found = Binaries(Path(done.stdout.strip().splitlines()[-1]))
    missing = found.missing()
    if missing:
        raise BinariesMissing(f"{found.directory} lacks {', '.join(missing)}")
    return found
