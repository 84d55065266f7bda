"""The Allocate response builder and the preferred-replica choice: the pure core of the device plugin.

Given the devices the scheduler decided for one container, it returns exactly the env vars and
mounts HAMi-core (``libvgpu.so``) reads, byte-compatible with HAMi's device plugin. It does no
I/O: the shell generates the cache id, checks which optional host files exist and creates the
per-container cache directory. It must not import grpc, nats or aiohttp.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.node_agent.errors import AllocateFailed, BadAllocateRequest
from shared.allocation_rules import MIXED_KINDS
from shared.errors import clip
from shared.model import ContainerDevice, DeviceUUID

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
OVERSUBSCRIBE = "CUDA_OVERSUBSCRIBE"
LOG_LEVEL = "LIBCUDA_LOG_LEVEL"
CORE_POLICY = "GPU_CORE_UTILIZATION_POLICY"
GDRCOPY = "NVIDIA_GDRCOPY"
GDS = "NVIDIA_GDS"
MOFED = "NVIDIA_MOFED"
VGPU_LOCK = "/tmp/vgpulock"
LD_PRELOAD_FILE = "/etc/ld.so.preload"

#: What Kubernetes gives a pod UID: an RFC 4122 string (a static pod's is an md5 hex digest), so
#: letters, digits and '-' only. Tests and simulators use short made-up UIDs of the same alphabet.
_POD_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,127}")
#: A container name is a DNS-1123 label (the API server refuses anything else).
_CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerResponse:
    """One ``ContainerAllocateResponse``: env vars and mounts."""

    envs: Mapping[str, str]
    mounts: tuple[Mount, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocateConfig:
    """The node-level inputs of a response (from settings and what the shell found on the host)."""

    hook_path: str = "/usr/local"
    memory_scaling: float = 1.0
    disable_core_limit: bool = False
    core_policy: str = "default"
    lib_cuda_log_level: int = 1
    libvgpu_file: str = "libvgpu.so"
    """Host file name under ``<hook>/vgpu`` (``libvgpu.so.<version>`` when present)."""
    license_present: bool = False
    """``<hook>/vgpu/license`` exists: mount it and ``vgpuvalidator`` as HAMi does."""
    gdrcopy: bool = False
    """``NVIDIA_GDRCOPY=enabled`` (HAMi's ``--gdrcopy-enabled``)."""
    gds: bool = False
    """``NVIDIA_GDS=enabled`` (HAMi's ``--gds-enabled``)."""
    mofed: bool = False
    """``NVIDIA_MOFED=enabled`` (HAMi's ``--mofed-enabled``)."""


def is_pod_uid(text: str) -> bool:
    """Could Kubernetes have given a pod this UID? (Never empty, '.', '/', '_' or a NUL byte.)"""
    return _POD_UID.fullmatch(text) is not None


def is_container_name(text: str) -> bool:
    """Is this a DNS-1123 label, as every Kubernetes container name is?"""
    return _CONTAINER_NAME.fullmatch(text) is not None


def cache_dir(hook_path: str, pod_uid: str, container: str) -> str:
    """Host directory mounted at ``<hook>/vgpu``: ``<hook>/vgpu/containers/<podUID>_<ctr>``.

    Only Kubernetes-shaped names get a path: neither part can hold '/', '_' or NUL, so the path
    stays under the hook path and two pods' directories never share a name.
    """
    if not is_pod_uid(pod_uid):
        raise BadAllocateRequest(f"pod UID {clip(pod_uid)!r} cannot name a cache directory")
    if not is_container_name(container):
        raise BadAllocateRequest(f"container name {clip(container)!r} cannot name a cache directory")
    return f"{hook_path}/vgpu/containers/{pod_uid}_{container}"


def build_container_response(
    devices: Sequence[ContainerDevice],
    config: AllocateConfig,
    *,
    pod_uid: str,
    container: str,
    cache_id: str,
    disable_control: bool = False,
) -> ContainerResponse:
    """Envs and mounts for one container; ``cache_id`` is a fresh uuid4 chosen by the caller.

    ``disable_control`` drops the ``/etc/ld.so.preload`` mount as HAMi does for a container whose
    env sets ``CUDA_DISABLE_CONTROL=true``. The kubelet's Allocate carries no container env, so
    the node-agent always passes False: HAMi-core is preloaded in every GPU container.
    """
    if not devices:
        raise BadAllocateRequest(f"container {container} of pod {pod_uid} has no decided devices")
    vgpu = f"{config.hook_path}/vgpu"
    return ContainerResponse(
        envs=_envs(devices, config, f"{vgpu}/{cache_id}.cache"),
        mounts=_mounts(config, cache_dir(config.hook_path, pod_uid, container), disable_control),
    )


def build_mig_response(devices: Sequence[ContainerDevice], mig_uuids: Sequence[str]) -> ContainerResponse:
    """A container on MIG instances sees only their MIG UUIDs: MIG isolates in hardware, so no
    HAMi-core limits and no mounts (HAMi v2.10 ``plugin/server.go`` Allocate in mig mode).

    Decisions that mix kinds are refused on arrival (:mod:`shared.allocation_rules`); this is the
    last guard, for a device the instance registry gave no MIG UUID."""
    if not devices or len(mig_uuids) != len(devices) or not all(mig_uuids):
        raise AllocateFailed(MIXED_KINDS)
    return ContainerResponse(envs={VISIBLE_DEVICES: ",".join(mig_uuids)}, mounts=())


def _envs(devices: Sequence[ContainerDevice], config: AllocateConfig, cache_file: str) -> dict[str, str]:
    envs = {VISIBLE_DEVICES: ",".join(d.uuid for d in devices)}
    for i, device in enumerate(devices):
        envs[f"{MEMORY_LIMIT}_{i}"] = f"{device.usedmem}m"
    envs[SM_LIMIT] = str(devices[0].usedcores)
    envs[SHARED_CACHE] = cache_file
    if config.memory_scaling > 1:
        envs[OVERSUBSCRIBE] = "true"
    envs[LOG_LEVEL] = str(config.lib_cuda_log_level)
    if config.disable_core_limit:
        envs[CORE_POLICY] = "disable"
    elif config.core_policy in ("force", "disable"):
        envs[CORE_POLICY] = config.core_policy
    for name, on in ((GDRCOPY, config.gdrcopy), (GDS, config.gds), (MOFED, config.mofed)):
        if on:
            envs[name] = "enabled"
    return envs


def _mounts(config: AllocateConfig, host_cache_dir: str, disable_control: bool) -> tuple[Mount, ...]:
    vgpu = f"{config.hook_path}/vgpu"
    mounts = [
        Mount(container_path=f"{vgpu}/libvgpu.so", host_path=f"{vgpu}/{config.libvgpu_file}", read_only=True),
        Mount(container_path=vgpu, host_path=host_cache_dir, read_only=False),
        Mount(container_path=VGPU_LOCK, host_path=VGPU_LOCK, read_only=False),
    ]
    if not disable_control:
        mounts.append(
            Mount(container_path=LD_PRELOAD_FILE, host_path=f"{vgpu}/ld.so.preload", read_only=True)
        )
    if config.license_present:
        mounts.append(Mount(container_path="/tmp/license", host_path=f"{vgpu}/license", read_only=True))
        mounts.append(
            Mount(container_path="/usr/bin/vgpuvalidator", host_path=f"{vgpu}/vgpuvalidator", read_only=True)
        )
    return tuple(mounts)


def preferred_replicas(
    decided: Sequence[DeviceUUID],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    uuid_of: Mapping[str, DeviceUUID],
) -> tuple[str, ...]:
    """Replica IDs of the decided GPUs, must-include first, then the first available per missing GPU.

    Returns fewer than ``size`` IDs when the decided GPUs have no free replica left; the kubelet
    fills the rest itself and Allocate then notices the mismatch.
    """
    wanted = list(decided)
    chosen: list[str] = []
    for device_id in must_include:
        uuid = uuid_of.get(device_id)
        if uuid in wanted:
            wanted.remove(uuid)
        chosen.append(device_id)
    taken = set(chosen)
    for uuid in wanted:
        pick = next((d for d in available if d not in taken and uuid_of.get(d) == uuid), None)
        if pick is not None:
            chosen.append(pick)
            taken.add(pick)
    return tuple(chosen[:size])
