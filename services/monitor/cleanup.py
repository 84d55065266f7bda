"""Removes HAMi-core cache directories of pods that no longer exist on the node.

A ``<podUID>_<container>`` directory is stale when its pod is not in the ledger and the
directory has not changed for a grace period (HAMi's resync interval, 5 min by default): the
grace covers a pod whose decision the monitor has not seen yet. :func:`stale_dirs` decides
(pure); :func:`remove_stale` acts. Callers must only run this once the ledger is synced.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from services.monitor.sources.hamicore import split_dir_name

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheDir:
    name: str
    mtime: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanupResult:
    removed: tuple[str, ...] = ()
    errors: int = 0


def stale_dirs(dirs: Iterable[CacheDir], known_pods: frozenset[str], now: float, grace_s: float) -> list[str]:
    """Names of directories whose pod is unknown and that are older than ``grace_s``.

    Directories not named ``<podUID>_<container>`` are never removed: they are not ours to judge.
    """
    stale = []
    for d in dirs:
        names = split_dir_name(d.name)
        if names is None or names[0] in known_pods:
            continue
        if now - d.mtime >= grace_s:
            stale.append(d.name)
    return sorted(stale)


def list_cache_dirs(containers_dir: Path) -> list[CacheDir]:
    try:
        return [
            CacheDir(name=e.name, mtime=e.stat(follow_symlinks=False).st_mtime)
            for e in os.scandir(containers_dir)
            if e.is_dir(follow_symlinks=False)
        ]
    except FileNotFoundError:
        return []


def remove_stale(
    containers_dir: Path, known_pods: frozenset[str], now: float, grace_s: float
) -> CleanupResult:
    """Delete stale directories; failures are logged and counted, never raised."""
    try:
        names = stale_dirs(list_cache_dirs(containers_dir), known_pods, now, grace_s)
    except OSError as e:
        log.warning("cache cleanup: cannot list %s: %s", containers_dir, e)
        return CleanupResult(errors=1)
    removed: list[str] = []
    errors = 0
    for name in names:
        try:
            shutil.rmtree(containers_dir / name)
        except OSError as e:
            errors += 1
            log.warning("cache cleanup: cannot remove %s: %s", containers_dir / name, e)
            continue
        log.info("removed cache directory %s of a pod that is gone", containers_dir / name)
        removed.append(name)
    return CleanupResult(removed=tuple(removed), errors=errors)
