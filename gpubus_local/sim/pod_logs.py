"""Container logs as the kubelet keeps them and the API server serves them (pure; no I/O).

- The files: ``<namespace>_<pod>_<uid>/<container>/<restarts>.log`` under the node's pod log directory
  (``/var/log/pods`` on a real node), one CRI log line per line of output,
  ``<RFC3339Nano time> <stdout|stderr> <F|P> <text>`` (``cri_lines`` writes them, ``parse_cri`` reads one).
- What a simulated container prints: a start line naming its node; per GPU an ``nvidia-smi -L``-like line
  with the limits HAMi-core enforces, read from the env the device plugin's ``Allocate`` answered
  (``NVIDIA_VISIBLE_DEVICES``, ``CUDA_DEVICE_MEMORY_LIMIT_<i>``, ``CUDA_DEVICE_SM_LIMIT``); how HAMi-core is
  loaded, from the mounts; and an exit line (``start_lines``, ``exit_line``).
- ``GET pods/{name}/log``: the query decoded as the API server's parameter codec does (a malformed value
  is a 400) and validated as ``ValidatePodLogOptions`` does (422 ``PodLogOptions``: ``parse_options``); the
  container chosen as ``LogLocation`` chooses it (400 for one the pod lacks; an unscheduled pod has an
  empty log) and its state checked as the kubelet's ``validateContainerLogStatus`` does (``locate``); the
  file's lines cut and shaped as the kubelet's log reader does: ``tailLines`` from the end, then
  ``sinceSeconds``/``sinceTime``, ``timestamps`` as fixed 9-digit RFC 3339, ``limitBytes`` on the bytes
  sent (``select``, ``clip``).

Knows no HTTP, files or clock: callers pass bytes and the time. Messages are the real components'.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpubus_local.sim import rfc3339
from gpubus_local.sim.errors import ApiError
from gpubus_local.sim.field_errors import FieldError, forbidden, invalid

# The env and mounts HAMi's device plugin answers Allocate with (the node-agent writes the same).
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
LD_PRELOAD = "LD_PRELOAD"
LD_PRELOAD_FILE = "/etc/ld.so.preload"
LIBVGPU = "libvgpu.so"

STDOUT = "stdout"
_STREAMS = frozenset({b"stdout", b"stderr"})
_INT64 = (-(2**63), 2**63 - 1)
_INT = re.compile(r"[+-]?[0-9]+")
_GO_RFC3339 = "2006-01-02T15:04:05Z07:00"
#: A path part the layout may hold: a DNS name or a uid (never '/', '..' or a NUL byte).
_PART = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,252})")
#: The kubelet's words for the waiting reasons it explains (``validateContainerLogStatus``).
_WAITING_WORDS = {"ErrImagePull": "image can't be pulled",
                  "ImagePullBackOff": "trying and failing to pull image"}
#: Memory limit suffixes HAMi-core reads, in MiB per unit (none: bytes).
_MIB_PER = {"k": 1 / 1024, "m": 1, "g": 1024, "": 1 / (1024 * 1024)}
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogOptions:
    """``PodLogOptions`` as decoded from the query (the parameters this stand-in honours)."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    since_seconds: int | None = None
    since_time_ns: int | None = None
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LogTarget:
    """The log to read: its file (relative to the log directory) and whether it can still grow."""

    container: str
    path: str
    running: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CriLine:
    time_ns: int
    stream: str
    full: bool
    """``F``: a whole line; ``P``: a part of one that goes on in the next record."""
    text: bytes


# -- the files ---------------------------------------------------------------------------------------


def pod_dir(namespace: str, name: str, uid: str) -> str:
    """``<namespace>_<pod>_<uid>``; ValueError if a part could leave the log directory."""
    return "_".join(_checked(part) for part in (namespace, name, uid))


def log_path(namespace: str, name: str, uid: str, container: str, restarts: int = 0) -> str:
    return f"{pod_dir(namespace, name, uid)}/{_checked(container)}/{restarts}.log"


def _checked(part: str) -> str:
    if not _PART.fullmatch(part) or ".." in part:
        raise ValueError(f"{part!r} cannot name a log directory")
    return part


def cri_lines(time_ns: int, lines: Iterable[str], stream: str = STDOUT) -> bytes:
    """One whole-line (``F``) CRI record per line of output, all at ``time_ns``."""
    stamp = rfc3339.format_nano(time_ns)
    return "".join(f"{stamp} {stream} F {part}\n" for line in lines for part in line.split("\n")).encode()


def parse_cri(line: bytes) -> CriLine | None:
    """One CRI record (without its newline); None if it is not one (the kubelet skips those)."""
    parts = line.split(b" ", 3)
    if len(parts) < 3 or parts[1] not in _STREAMS:
        return None
    stamp = rfc3339.parse_ns(parts[0].decode("ascii", "replace"))
    tag = parts[2].split(b":", 1)[0]
    if stamp is None or tag not in (b"F", b"P"):
        return None
    return CriLine(time_ns=stamp, stream=parts[1].decode(), full=tag == b"F",
                   text=parts[3] if len(parts) > 3 else b"")


# -- what a simulated container prints ---------------------------------------------------------------


def start_lines(*, node: str, namespace: str, pod: str, container: str, envs: Mapping[str, str],
                mounts: Sequence[tuple[str, str, bool]], gpu_names: Mapping[str, str]) -> list[str]:
    """The start line, a line per GPU the container sees, and how HAMi-core is loaded (GPU containers)."""
    lines = [f"Started container {container} of pod {namespace}/{pod} on node {node} (simulated by gpubus)"]
    lines += _gpu_lines(envs, gpu_names)
    hami = _hami_core_line(envs, mounts)
    if hami is not None:
        lines.append(hami)
    return lines


def exit_line(container: str, code: int = 0, reason: str = "Completed") -> str:
    return f"Container {container} exited with code {code} ({reason})"


def _gpu_lines(envs: Mapping[str, str], gpu_names: Mapping[str, str]) -> list[str]:
    sm = envs.get(SM_LIMIT, "")
    sm_text = f"{sm} %" if sm.isdigit() and int(sm) > 0 else "none"
    uuids = [u.strip() for u in envs.get(VISIBLE_DEVICES, "").split(",") if u.strip()]
    return [f"GPU {i}: {gpu_names.get(uuid, 'unknown model')} (UUID: {uuid})  "
            f"memory limit {_memory_text(envs.get(f'{MEMORY_LIMIT}_{i}'))}  SM limit {sm_text}"
            for i, uuid in enumerate(uuids)]


def _memory_text(value: str | None) -> str:
    """``3000m`` -> ``3000 MiB``, as HAMi-core reads the limit (k, m, g suffixes; none: bytes)."""
    m = re.fullmatch(r"([0-9]+)([kKmMgG]?)", (value or "").strip())
    if m is None or int(m.group(1)) == 0:
        return "none"
    return f"{int(int(m.group(1)) * _MIB_PER[m.group(2).lower()])} MiB"


def _hami_core_line(envs: Mapping[str, str], mounts: Sequence[tuple[str, str, bool]]) -> str | None:
    library = next((c for c, _, _ in mounts if c.rsplit("/", 1)[-1] == LIBVGPU), None)
    if library is None:
        return None
    if any(c == LD_PRELOAD_FILE for c, _, _ in mounts):
        return f"HAMi-core: {library} preloaded through {LD_PRELOAD_FILE}"
    if LIBVGPU in envs.get(LD_PRELOAD, ""):
        return f"HAMi-core: {library} preloaded through {LD_PRELOAD}"
    return f"HAMi-core: {library} mounted but not preloaded: the limits are not enforced"


# -- the request ---------------------------------------------------------------------------------------


def parse_options(pod_name: str, query: Mapping[str, str]) -> LogOptions:
    """The query as ``PodLogOptions``: 400 for a value that does not decode, 422 for an invalid one."""
    since_time = query.get("sinceTime")
    options = LogOptions(
        container=query.get("container", ""), follow=_bool(query.get("follow")),
        previous=_bool(query.get("previous")), since_seconds=_int64(query.get("sinceSeconds")),
        since_time_ns=_time(since_time) if since_time else None, timestamps=_bool(query.get("timestamps")),
        tail_lines=_int64(query.get("tailLines")), limit_bytes=_int64(query.get("limitBytes")))
    errors = validate(options)
    if errors:
        raise ApiError.invalid_fields("PodLogOptions", pod_name, errors)
    return options


def validate(options: LogOptions) -> list[FieldError]:
    """``ValidatePodLogOptions``."""
    errors = []
    if options.tail_lines is not None and options.tail_lines < 0:
        errors.append(invalid("tailLines", options.tail_lines, "must be greater than or equal to 0"))
    if options.limit_bytes is not None and options.limit_bytes < 1:
        errors.append(invalid("limitBytes", options.limit_bytes, "must be greater than 0"))
    if options.since_seconds is not None and options.since_time_ns is not None:
        errors.append(forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif options.since_seconds is not None and options.since_seconds < 1:
        errors.append(invalid("sinceSeconds", options.since_seconds, "must be greater than 0"))
    return errors


def _bool(text: str | None) -> bool:
    """Absent, ``0`` or ``false`` (any case) is false; anything else true, as the parameter codec reads it."""
    return text is not None and text != "0" and text.lower() != "false"


def _int64(text: str | None) -> int | None:
    if text is None:
        return None
    if not _INT.fullmatch(text):
        raise ApiError.bad_request(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise ApiError.bad_request(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def _time(text: str) -> int:
    parsed = rfc3339.parse_ns(text)
    if parsed is None:
        raise ApiError.bad_request(f'parsing time "{text}" as "{_GO_RFC3339}": not an RFC 3339 time')
    return parsed


def locate(pod: Mapping[str, Any], options: LogOptions) -> LogTarget | None:
    """The log ``options`` ask for, or None where the pod has no node yet (the real answer: empty).
    ApiError 400 as ``LogLocation`` and the kubelet refuse: a container the pod lacks, one not started."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    name = meta.get("name", "")
    container = _container(spec, name, options.container)
    if not spec.get("nodeName"):
        return None
    status = pod.get("status") or {}
    found = next((s for key in _STATUS_LISTS for s in status.get(key) or [] if s.get("name") == container),
                 None)
    if found is None:
        raise ApiError.bad_request(_not_started(spec, status, container, name))
    restarts, running = _readable(found, container, name, options.previous)
    try:
        path = log_path(meta.get("namespace", ""), name, meta.get("uid", ""), container, restarts)
    except ValueError:
        raise ApiError.bad_request(f'container "{container}" in pod "{name}" is not available') from None
    return LogTarget(container=container, path=path, running=running)


def _container(spec: Mapping[str, Any], pod: str, wanted: str) -> str:
    names = [c.get("name", "") for key in _CONTAINER_LISTS for c in spec.get(key) or []]
    if wanted:
        if wanted not in names:
            raise ApiError.bad_request(f"container {wanted} is not valid for pod {pod}")
        return wanted
    containers = spec.get("containers") or []
    if len(containers) == 1:
        return str(containers[0].get("name", ""))
    if not containers:
        raise ApiError.bad_request(f"a container name must be specified for pod {pod}")
    raise ApiError.bad_request(f"a container name must be specified for pod {pod}, choose one of: "
                               f"[{' '.join(names)}]")


def _not_started(spec: Mapping[str, Any], status: Mapping[str, Any], container: str, pod: str) -> str:
    """No status for the container. A real kubelet posts ``waiting`` ones as soon as it takes a pod; the
    simulated one posts only Running, so a bound Pending pod reads as the real one would."""
    if status.get("phase", "Pending") != "Pending":
        return f'container "{container}" in pod "{pod}" is not available'
    is_app = any(c.get("name") == container for c in spec.get("containers") or [])
    reason = "PodInitializing" if is_app and spec.get("initContainers") else "ContainerCreating"
    return f'container "{container}" in pod "{pod}" is waiting to start: {reason}'


def _readable(found: Mapping[str, Any], container: str, pod: str, previous: bool) -> tuple[int, bool]:
    """(restart number of the log file, still running) or the kubelet's 400 for a container without one."""
    state, last = found.get("state") or {}, found.get("lastState") or {}
    restarts = int(found.get("restartCount") or 0)
    ended = last.get("terminated")
    who = f'container "{container}" in pod "{pod}"'
    if previous:
        if not ended or not ended.get("containerID"):
            raise ApiError.bad_request(f"previous terminated {who} not found")
        return restarts - 1, False
    if state.get("running") is not None:
        return restarts, True
    if state.get("terminated") is not None:
        if state["terminated"].get("containerID"):
            return restarts, False
        if ended and ended.get("containerID"):
            return restarts - 1, False
        raise ApiError.bad_request(f"{who} is terminated")
    if ended is not None:
        if not ended.get("containerID"):
            raise ApiError.bad_request(f"{who} is terminated")
        return restarts - 1, False
    waiting = state.get("waiting")
    if waiting is not None:
        reason = waiting.get("reason", "")
        raise ApiError.bad_request(f"{who} is waiting to start: {_WAITING_WORDS.get(reason, reason)}")
    raise ApiError.bad_request(f"{who} is waiting to start - no logs yet")


# -- the answer ---------------------------------------------------------------------------------------------


def since_cutoff(options: LogOptions, now_ns: int) -> int | None:
    """The earliest record time to send (None: all), fixed when the request arrives."""
    if options.since_seconds is not None:
        return now_ns - options.since_seconds * rfc3339.NS_PER_S
    return options.since_time_ns


def complete(data: bytes) -> int:
    """How many bytes of ``data`` are whole records (a writer may be half way through the last)."""
    return data.rfind(b"\n") + 1


def select(data: bytes, *, cutoff_ns: int | None, tail_lines: int | None, timestamps: bool) -> bytes:
    """Whole records of ``data`` as the client gets them: the last ``tail_lines``, those at or after
    ``cutoff_ns``, each optionally behind its time. Records that do not parse are skipped."""
    raw = data[:complete(data)].split(b"\n")[:-1]
    if tail_lines is not None:
        raw = raw[len(raw) - tail_lines:] if tail_lines else []
    out = []
    for line in raw:
        record = parse_cri(line)
        if record is None or (cutoff_ns is not None and record.time_ns < cutoff_ns):
            continue
        if timestamps:
            out.append(rfc3339.format_nano_fixed(record.time_ns).encode() + b" ")
        out.append(record.text + b"\n" if record.full else record.text)
    return b"".join(out)


def clip(chunk: bytes, remaining: int | None) -> tuple[bytes, int | None]:
    """``limitBytes``: at most ``remaining`` more bytes (None: no limit); returns what is left after."""
    if remaining is None:
        return chunk, None
    return chunk[:remaining], max(0, remaining - len(chunk))


def is_running(pod: Mapping[str, Any] | None, uid: str, container: str) -> bool:
    """Is ``container`` of this pod (``uid``: not a new one of the same name) still running?"""
    if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
        return False
    status = pod.get("status") or {}
    return any(s.get("name") == container and (s.get("state") or {}).get("running") is not None
               for key in _STATUS_LISTS for s in status.get(key) or [])
