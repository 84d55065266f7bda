"""Which pod and container a process belongs to, from ``/proc/<pid>/cgroup``.

Understands cgroup v1 (``<id>:<controllers>:<path>``) and v2 (``0::<path>``) lines, with the
systemd driver (``kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope``,
``crio-<id>.scope``, ``docker-<id>.scope``) and the cgroupfs driver
(``/kubepods/burstable/pod<uid>/<id>``). The pod UID is the reliable part; the container id is
the runtime's, not the container's name (callers map it through the ledger).
:func:`parse_cgroup` is pure; :class:`ProcCgroups` reads files under a configurable proc root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from services.monitor.errors import CgroupError

_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$"
)
#: Runtime prefixes of a container's scope; ``crio-conmon-`` is CRI-O's monitor process, not a container.
_CONTAINER = re.compile(r"^(?:(cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$")
_RUNTIMES = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@dataclass(frozen=True, slots=True, kw_only=True)
class CgroupRef:
    pod_uid: str
    container_id: str = ""
    """64-hex runtime id; empty for a pod-level process (e.g. the sandbox)."""
    runtime: str = ""


def parse_cgroup(text: str) -> CgroupRef:
    """The pod (and container) named by a cgroup file, v2 line first; :class:`CgroupError` if none."""
    paths = _paths(text)
    for path in paths:
        ref = _parse_path(path)
        if ref is not None:
            return ref
    raise CgroupError(f"no kubepods pod in cgroup paths {paths[:3]!r}")


def _paths(text: str) -> list[str]:
    """cgroup paths, the unified (v2) hierarchy first."""
    v2: list[str] = []
    v1: list[str] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        (v2 if parts[0] == "0" and parts[1] == "" else v1).append(parts[2])
    return v2 + v1


def _parse_path(path: str) -> CgroupRef | None:
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        match = _POD.search(part)
        if match is None or "kubepods" not in path:
            continue
        uid = match.group(1).replace("_", "-")
        rest = parts[i + 1] if i + 1 < len(parts) else ""
        container = _CONTAINER.match(rest)
        if container is None:
            return CgroupRef(pod_uid=uid)
        runtime = _RUNTIMES.get(container.group(1) or "", "")
        return CgroupRef(pod_uid=uid, container_id=container.group(2), runtime=runtime)
    return None


class ProcCgroups:
    """Reads ``<proc_root>/<pid>/cgroup``; the root is configurable so tests use a fake tree."""

    def __init__(self, proc_root: Path) -> None:
        self.proc_root = proc_root

    def of(self, pid: int) -> CgroupRef:
        """The pod of ``pid``; :class:`CgroupError` when the file is gone, unreadable or names none."""
        try:
            text = (self.proc_root / str(pid) / "cgroup").read_text(errors="replace")
        except OSError as e:
            raise CgroupError(f"pid {pid}: cannot read cgroup: {e.strerror or e}") from e
        try:
            return parse_cgroup(text)
        except CgroupError as e:
            raise CgroupError(f"pid {pid}: {e}") from e
