"""The data dir of a ``gpubus up`` stack: made (with its sub-directories) and held by one stack at a time.

Two stacks on one data dir would run two nats-servers on one JetStream store and overwrite each
other's kubeconfig and ready files, and ``--fresh`` would delete the store under a live server; so
a stack holds an exclusive ``flock`` on ``up.lock`` for its whole life. The kernel drops the lock
when the holder exits, however it exits, so a crashed stack never leaves the dir locked.
Knows nothing of what runs in the stack.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from shared.errors import BadInput, Retryable

LOCK_NAME = "up.lock"
#: Sub-directories the stack and its children write into (NATS store, logs, ready files, certificates).
SUBDIRS = ("nats", "logs", "run", "tls")


class DataDirError(BadInput):
    """The data dir cannot hold a stack (not a directory, cannot be made or written): choose another."""


class DataDirBusy(Retryable):
    """Another stack holds the data dir: stop it, or choose another data dir."""


def make_dirs(data_dir: Path, subdirs: tuple[str, ...] = ()) -> None:
    """Create ``data_dir`` and ``subdirs`` in it; DataDirError naming the one that cannot be made."""
    for path in (data_dir, *(data_dir / name for name in subdirs)):
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DataDirError(f"--data-dir {data_dir}: cannot make {path}: {e.strerror or e}") from None


class DataDirLock:
    """An exclusive, non-blocking ``flock`` on ``<data_dir>/up.lock``; the file names the holder's pid."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_NAME
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock or raise DataDirBusy (naming the holder's pid when it has written it)."""
        if self._file is not None:
            return
        try:
            file = self.path.open("a+", encoding="utf-8")
        except OSError as e:
            raise DataDirError(f"--data-dir {self.data_dir}: cannot open {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip()
            file.close()
            by = f" (pid {holder})" if holder.isdigit() else ""
            raise DataDirBusy(f"--data-dir {self.data_dir} is in use by another `gpubus up`{by}: "
                              "stop it, or choose another --data-dir") from None
        except OSError as e:
            file.close()
            raise DataDirError(f"--data-dir {self.data_dir}: cannot lock {self.path}: {e.strerror}") from None
        file.seek(0)
        file.truncate()
        file.write(f"{os.getpid()}\n")
        file.flush()
        self._file = file

    def release(self) -> None:
        """Closing the file drops the lock; the file stays (removing it could race a new holder)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()
