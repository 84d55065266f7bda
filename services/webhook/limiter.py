"""Tamper check (contract item 7): a pod must not set the env vars the in-container limiter obeys.

HAMi-core (``libvgpu.so``) reads its limits from env vars the device plugin sets; a container that
sets them itself, or ``LD_PRELOAD``s a CUDA/NVML library ahead of the limiter, escapes its slice.
Only what the pod spec shows can be checked: env names, literal ``LD_PRELOAD`` values and the
``prefix`` of ``envFrom`` (the keys of a referenced ConfigMap or Secret are not visible here), so a
value taken from a reference (``valueFrom`` or a ``$(VAR)`` expansion) is refused, not guessed at.
Pure; knows nothing about HTTP or Kubernetes clients.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Env vars only the device plugin may set.
PROTECTED = frozenset({"CUDA_DISABLE_CONTROL", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE"})
#: Env var families only the device plugin may set (``CUDA_DEVICE_MEMORY_LIMIT_0`` ...).
PROTECTED_PREFIXES = ("CUDA_DEVICE_MEMORY_LIMIT",)
#: Set by the webhook itself when a GPU core policy is configured; ``disable`` from a pod is tampering.
CORE_POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"
#: Core policy values a pod may carry whatever the configuration: they limit, never unlimit.
HARMLESS_CORE_POLICIES = frozenset({"default", "force"})
PRELOAD_ENV = "LD_PRELOAD"
#: Kubernetes expands ``$(VAR)`` in env values from earlier entries, ``envFrom`` keys and service
#: variables; the last two are invisible here, so expanding cannot be exact and any ``$(`` is refused.
#: That includes the ``$$(`` escape, which no real library path needs.
VAR_REFERENCE = "$("
#: Library names that, preloaded, sit in front of (or replace) the limiter's interception.
DEFAULT_PRELOAD_MARKERS = ("libvgpu", "libcuda", "libnvidia-ml", "libnvcuvid", "libcudart")


def is_protected(name: str) -> bool:
    return name in PROTECTED or name.startswith(PROTECTED_PREFIXES)


def tampering(
    container: Mapping[str, object],
    *,
    name: str,
    core_policy: str,
    preload_markers: Iterable[str] = DEFAULT_PRELOAD_MARKERS,
) -> str | None:
    """Why this container would bypass the limiter, or None. ``core_policy`` is the configured policy."""
    for env in _items(container.get("env")):
        var = env.get("name")
        if not isinstance(var, str):
            continue
        if is_protected(var):
            return f"container {name} sets {var}, which would bypass the GPU limiter"
        if var == CORE_POLICY_ENV and not _harmless_policy(env.get("value"), core_policy):
            return f"container {name} sets {var}, which would bypass the GPU core limit"
        if var == PRELOAD_ENV:
            why = _preload_problem(env, name, tuple(preload_markers))
            if why:
                return why
    for source in _items(container.get("envFrom")):
        prefix = source.get("prefix")
        if isinstance(prefix, str) and prefix and _prefix_reaches_protected(prefix):
            return (
                f"container {name} imports env vars with prefix {prefix!r}, which could set the "
                f"GPU limiter's own variables"
            )
    return None


def _harmless_policy(value: object, core_policy: str) -> bool:
    """Only a literal harmless value: ``$(VAR)`` or ``valueFrom`` could expand to ``disable``."""
    return isinstance(value, str) and value in HARMLESS_CORE_POLICIES | {core_policy}


def _preload_problem(env: Mapping[str, object], name: str, markers: tuple[str, ...]) -> str | None:
    value = env.get("value")
    if env.get("valueFrom") is not None or (isinstance(value, str) and VAR_REFERENCE in value):
        return (
            f"container {name} takes {PRELOAD_ENV} from a reference, which cannot be checked for the limiter"
        )
    if not isinstance(value, str):
        return None
    for entry in value.replace(":", " ").split():
        library = entry.rsplit("/", 1)[-1].lower()
        if library.startswith(markers):
            return f"container {name} preloads {entry} in {PRELOAD_ENV}, which would bypass the GPU limiter"
    return None


def _prefix_reaches_protected(prefix: str) -> bool:
    targets = (*PROTECTED, *PROTECTED_PREFIXES, CORE_POLICY_ENV, PRELOAD_ENV)
    return any(t.startswith(prefix) or prefix.startswith(t) for t in targets)


def _items(value: object) -> list[Mapping[str, object]]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, Mapping)]
