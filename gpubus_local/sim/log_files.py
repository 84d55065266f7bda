"""The pod log directory of the simulated kubelets: write a container's log file, read it, remove a pod's,
empty the directory.

The layout and the CRI line format are ``pod_logs``'s; this module only touches files, cheaply, since
every simulated pod goes through it (``bench/e2e.py`` starts hundreds a second): a container's start
(the caller says it is ``new``) is two ``mkdir`` and one small write, its end one append, a pod's
removal an unlink and an ``rmdir`` per container. Files are written whole lines at a time with
``O_APPEND``, so a reader never sees half a record except at the end of what it read, which
``pod_logs.complete`` leaves for the next read. Blocking calls on purpose: on a local disk each is
tens of microseconds, less than a thread hop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from gpubus_local.sim import pod_logs

log = logging.getLogger(__name__)


class PodLogFiles:
    """The container logs under ``root`` (a node's ``/var/log/pods``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, namespace: str, name: str, uid: str, container: str, *, lines: Iterable[str],
              time_ns: int, new: bool = False) -> None:
        """Append ``lines`` to the container's log, made with its directories if it is new.

        ``new``: the container just started, so its directories are made before the write rather
        than after a failed one (a log that turns out to be missing anyway is made either way).
        """
        try:
            relative = pod_logs.log_path(namespace, name, uid, container)
        except ValueError as e:
            log.debug("pod %s/%s: no log kept: %s", namespace, name, e)
            return
        data = pod_logs.cri_lines(time_ns, lines)
        path = self.root / relative
        try:
            if new:
                _make_dirs(path.parent, self.root)
            try:
                _append(path, data)
            except FileNotFoundError:  # a new container: make its directories once, then write
                _make_dirs(path.parent, self.root)
                _append(path, data)
        except OSError as e:  # a log is never worth failing the pod for
            log.warning("pod %s/%s: container %s log not written: %s", namespace, name, container, e)

    def remove(self, namespace: str, name: str, uid: str, containers: Iterable[str]) -> None:
        """The pod is gone: its log directory goes (the kubelet removes it with the pod)."""
        try:
            pod = self.root / pod_logs.pod_dir(namespace, name, uid)
        except ValueError:
            return
        for container in containers:
            with contextlib.suppress(OSError):
                for entry in os.scandir(pod / container):
                    os.unlink(entry.path)
            with contextlib.suppress(OSError):
                os.rmdir(pod / container)
        with contextlib.suppress(OSError):
            os.rmdir(pod)

    def clear(self) -> None:
        """Every pod's logs gone, the directory left empty (made if missing). For a start: the pods
        they belonged to lived in an API server stand-in's memory and are gone with it."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)

    def read(self, relative: str, offset: int = 0) -> bytes:
        """The log's bytes from ``offset``; FileNotFoundError if there is no such log."""
        with open(self.root / relative, "rb") as f:
            if offset:
                f.seek(offset)
            return f.read()


def _append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _make_dirs(directory: Path, root: Path) -> None:
    """The pod's directory and the container's in it (``makedirs`` would stat every level above)."""
    for level in (directory.parent, directory):
        try:
            os.mkdir(level)
        except FileExistsError:
            pass
        except FileNotFoundError:  # the log directory itself is not there (yet, or any more)
            root.mkdir(parents=True, exist_ok=True)
            os.mkdir(level)
