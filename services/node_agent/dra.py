"""DRA mode's pure core: the node's ResourceSlice, a claim's allocated devices, and its CDI spec.

gpubus as a Kubernetes DRA driver (``resource.k8s.io/v1``, consumable capacity): each GPU is one
device that many claims share (``allowMultipleAllocations``), each claim consuming part of its
``memory`` (bytes) and ``cores`` (percent of the SMs). kube-scheduler does the placement; the
node-agent prepares a claim by writing a CDI spec whose edits are exactly what extender mode's
Allocate gives a container (:func:`services.node_agent.allocate.build_container_response`).
No I/O here: dicts in, dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.node_agent.allocate import AllocateConfig, build_container_response
from shared import dra as names
from shared.dra import CORES, DRIVER, MEMORY, MIB
from shared.model import ContainerDevice, DeviceInfo, DeviceUUID
from shared.requests import parse_quantity

CDI_VENDOR = "gpubus.io"
CDI_CLASS = "gpu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
CDI_VERSION = "0.6.0"
UNHEALTHY_TAINT = f"{DRIVER}/unhealthy"
CACHE_CONTAINER = "dra"
"""The container name part of a claim's HAMi-core cache dir (``<claim uid>_dra``): a claim may be
shared by several containers, which then share one cache, as they share the claim's limits."""

Json = dict[str, Any]


class BadClaim(ValueError):
    """A ResourceClaim whose allocation this node cannot prepare (not ours, unknown device, bad capacity)."""


def device_name(device: DeviceInfo) -> str:
    """A GPU's DRA device name: ``gpu-<index>`` (a DNS label, stable across restarts)."""
    return names.device_name(device.index)


def slice_name(node: str, driver: str = DRIVER) -> str:
    """The node's one ResourceSlice: ``<node>-<driver with dots as dashes>``."""
    return f"{node}-{driver.replace('.', '-')}"


def mib_quantity(mib: int) -> str:
    """MiB as the API server writes the quantity back (largest exact binary suffix: ``80Gi``), so a
    slice read back compares equal to the one built."""
    for suffix, power in (("Ei", 40), ("Pi", 30), ("Ti", 20), ("Gi", 10)):
        if mib and mib % (1 << power) == 0:
            return f"{mib >> power}{suffix}"
    return f"{mib}Mi"


def _device(device: DeviceInfo) -> Json:
    memory = mib_quantity(device.devmem)
    out: Json = {
        "name": device_name(device),
        "attributes": {
            "uuid": {"string": device.id},
            "productName": {"string": device.type},
            "index": {"int": device.index},
            "numa": {"int": device.numa},
        },
        "allowMultipleAllocations": True,
        "capacity": {
            # no memory asked = the whole card, as HAMi gives a container without nvidia.com/gpumem
            MEMORY: {"value": memory, "requestPolicy": {
                "default": memory, "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"}}},
            # no cores asked = 0: no SM limit, as HAMi's gpucores default
            CORES: {"value": str(device.devcore), "requestPolicy": {
                "default": "0", "validRange": {"min": "0", "max": str(device.devcore), "step": "1"}}},
        },
    }
    if not device.health:
        out["taints"] = [{"key": UNHEALTHY_TAINT, "value": "true", "effect": "NoSchedule"}]
    return out


def resource_slice(node: str, devices: Sequence[DeviceInfo], generation: int, driver: str = DRIVER) -> Json:
    """The node's ResourceSlice: one pool named after the node, one slice, every GPU of it.

    ``generation`` must grow whenever the devices (or their health) change: kube-scheduler then
    ignores slices of older generations."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node, driver)},
        "spec": {
            "driver": driver, "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [_device(d) for d in sorted(devices, key=lambda d: d.index)],
        },
    }


def same_devices(a: Json, b: Json) -> bool:
    """Do two slices advertise the same devices (so no new generation is needed)? The taints'
    ``timeAdded`` (set by the API server) does not count."""
    return _comparable(a) == _comparable(b)


def _comparable(slice_: Json) -> list[Json]:
    out = []
    for device in (slice_.get("spec") or {}).get("devices") or []:
        taints = [{k: v for k, v in t.items() if k != "timeAdded"} for t in device.get("taints") or []]
        out.append({**device, "taints": taints})
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimDevice:
    """One device of a claim's allocation on this node, with what it consumes."""

    request: str
    pool: str
    device: str
    uuid: DeviceUUID
    index: int
    memory_mib: int
    cores: int
    share_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


def claim_devices(claim: Mapping[str, Any], *, node: str, devices: Sequence[DeviceInfo],
                  driver: str = DRIVER) -> tuple[ClaimDevice, ...]:
    """This node's devices in ``claim``'s allocation, with their consumed memory (MiB) and cores.

    A result without ``consumedCapacity`` (a device not shared) takes the whole card."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise BadClaim("the claim is not allocated")
    by_name = {device_name(d): d for d in devices}
    out = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") != driver:
            continue
        if result.get("pool") != node:
            raise BadClaim(f"device {result.get('device')!r} is in pool {result.get('pool')!r}, not {node!r}")
        card = by_name.get(str(result.get("device")))
        if card is None:
            raise BadClaim(f"device {result.get('device')!r} is not on {node}")
        consumed = result.get("consumedCapacity") or {}
        try:
            memory = parse_quantity(consumed.get(MEMORY, f"{card.devmem}Mi"))
            cores = parse_quantity(consumed.get(CORES, "0" if consumed else str(card.devcore)))
        except ValueError as e:
            raise BadClaim(f"device {card_name(result)}: consumed capacity {consumed!r}: {e}") from e
        if not 0 < memory <= card.devmem * MIB or not 0 <= cores <= card.devcore:
            raise BadClaim(f"device {card_name(result)}: consumed capacity {consumed!r} outside the card")
        out.append(ClaimDevice(request=str(result.get("request", "")), pool=node, device=card_name(result),
                               uuid=card.id, index=card.index, memory_mib=-(-memory // MIB), cores=cores,
                               share_id=str(result.get("shareID") or "")))
    if not out:
        raise BadClaim(f"no device of driver {driver} in the claim's allocation")
    return tuple(out)


def card_name(result: Mapping[str, Any]) -> str:
    return str(result.get("device", ""))


def reserved_pods(claim: Mapping[str, Any]) -> tuple[ClaimRef, ...]:
    """The pods a claim is reserved for (``status.reservedFor``), namespaced as the claim."""
    namespace = str((claim.get("metadata") or {}).get("namespace", ""))
    return tuple(ClaimRef(namespace=namespace, name=str(r.get("name", "")), uid=str(r.get("uid", "")))
                 for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods")


def cdi_device_id(claim_uid: str) -> str:
    """The fully qualified CDI device name the kubelet hands the runtime: ``gpubus.io/gpu=<uid>``."""
    return f"{CDI_KIND}={claim_uid}"


def cdi_spec(claim_uid: str, devices: Sequence[ClaimDevice], config: AllocateConfig, *,
             cache_id: str) -> Json:
    """A claim's CDI spec: one CDI device (named by the claim uid) whose edits give a container
    HAMi-core's env and mounts for every card of the claim, as extender mode's Allocate would."""
    ordered = sorted(devices, key=lambda d: d.index)
    response = build_container_response(
        [ContainerDevice(uuid=d.uuid, usedmem=d.memory_mib, usedcores=d.cores, idx=d.index) for d in ordered],
        config, pod_uid=claim_uid, container=CACHE_CONTAINER, cache_id=cache_id)
    mounts = [{"hostPath": m.host_path, "containerPath": m.container_path,
               "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "bind"]}
              for m in response.mounts]
    return {
        "cdiVersion": CDI_VERSION, "kind": CDI_KIND,
        "devices": [{"name": claim_uid, "containerEdits": {
            "env": [f"{k}={v}" for k, v in response.envs.items()], "mounts": mounts}}],
    }
