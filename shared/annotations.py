"""HAMi annotation keys and byte-exact codecs for the values gpubus reads and writes.

API:
    key constants (``ASSIGNED_NODE``, ``DEVICES_ALLOCATED``, ``NODE_REGISTER``, ``USE_GPUTYPE``...), BindPhase
    encode_pod_devices(PodDevices) -> str    ``UUID,NVIDIA,MEM,CORES:`` per card, ``;`` per container slot
    decode_pod_devices(str) -> PodDevices    drops only the one trailing empty slot the final ``;`` makes
    encode_node_devices(devices) -> str      node register JSON (Go field order, omitempty, HTML escaping)
    decode_node_devices(str) -> devices      the JSON form; decode_node_devices_legacy: the colon form;
                                             decode_node_register picks by shape
    decode_pair_scores(str) -> {uuid: {uuid: score}}   ``hami.io/node-nvidia-score`` (topology-aware)
    parse_list(str) -> tuple[str, ...]       comma lists (cordon, use/nouse), trimmed, empties dropped
    collapse_usage(devices, init_count) -> {uuid: DeviceUsage}   init per-device max, app summed, max of both

Every malformed value raises :class:`shared.errors.AnnotationError`. This module must not know about
Fit, scoring, Kubernetes clients or the bus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

from shared.errors import AnnotationError
from shared.model import (
    ContainerDevice,
    DeviceInfo,
    DeviceMode,
    DeviceUsage,
    DeviceUUID,
    MigPlacement,
    MigProfile,
    MigSlice,
    PodDevices,
)

# Pod annotations written by the scheduler (and the label of the same key as ASSIGNED_NODE).
ASSIGNED_NODE = "hami.io/vgpu-node"
ASSIGNED_TIME = "hami.io/vgpu-time"
DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"
# Node annotations.
NODE_REGISTER = "hami.io/node-nvidia-register"
NODE_SCORE = "hami.io/node-nvidia-score"
NODE_HANDSHAKE = "hami.io/node-handshake"
NODE_LOCK = "hami.io/mutex.lock"
DEVICE_CORDON = "hami.io/device-cordon"
# Pod annotations read from the user.
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
USE_GPUUUID = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID = "nvidia.com/nouse-gpuuuid"
NUMA_BIND = "nvidia.com/numa-bind"
VGPU_MODE = "nvidia.com/vgpu-mode"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"
# Label on a namespace or pod that makes the webhook skip it.
WEBHOOK_LABEL = "hami.io/webhook"
WEBHOOK_IGNORE = "ignore"

POD_FORMAT_ERROR = "pod annotation format error, missing fields, do not use nodeName in task spec"
_INT32 = (-(2**31), 2**31 - 1)
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class BindPhase(StrEnum):
    """Values of ``hami.io/bind-phase``."""

    ALLOCATING = "allocating"
    SUCCESS = "success"
    FAILED = "failed"


# --- PodSingleDevice ---------------------------------------------------------------------------


def encode_pod_devices(devices: PodDevices) -> str:
    """``UUID,TYPE,MEM,CORES:`` per card, every container slot terminated by ``;`` (empty slots kept)."""
    return "".join(
        "".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in slot) + ";" for slot in devices
    )


def _go_int(text: str) -> int:
    """Go's ``strconv.ParseInt(s, 10, 32)``; gpubus refuses what Go would read as 0."""
    try:
        value = int(text, 10)
    except ValueError:
        raise AnnotationError(f"pod annotation format error: {text!r} is not an integer") from None
    if not _INT32[0] <= value <= _INT32[1] or text.strip() != text or "_" in text:
        raise AnnotationError(f"pod annotation format error: {text!r} is not an int32")
    return value


def _decode_slot(text: str) -> tuple[ContainerDevice, ...]:
    out: list[ContainerDevice] = []
    for chunk in text.split(":"):
        if "," not in chunk:
            continue
        fields = chunk.split(",")
        if len(fields) < 4:
            raise AnnotationError(POD_FORMAT_ERROR)
        out.append(
            ContainerDevice(
                uuid=DeviceUUID(fields[0]),
                type=fields[1],
                usedmem=_go_int(fields[2]),
                usedcores=_go_int(fields[3]),
            )
        )
    return tuple(out)


def decode_pod_devices(value: str) -> PodDevices:
    """Inverse of :func:`encode_pod_devices`: one slot per container, inner empty slots preserved.

    Splitting on ``;`` always leaves one extra empty element after the final terminator; that one
    element (and only it) is dropped, so ``decode(encode(x)) == x``.
    """
    if value == "":
        return ()
    parts = value.split(";")
    if parts[-1] == "":
        parts.pop()
    return tuple(_decode_slot(p) for p in parts)


# --- node register annotation ------------------------------------------------------------------


def _go_json(value: object) -> str:
    # Go's encoding/json escapes <, >, & and U+2028/9 and writes everything else as raw UTF-8.
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, esc)
    return text


def mig_profile_wire(p: MigProfile) -> dict[str, object]:
    # HAMi pkg/device/devices.go MigProfile: no omitempty; InstanceCount is not on the wire.
    return {
        "name": p.name,
        "memoryMB": p.memory_mb,
        "core": p.core,
        "sliceCount": p.slice_count,
        "placements": [{"start": x.start, "size": x.size} for x in p.placements],
    }


def _device_wire(d: DeviceInfo) -> dict[str, object]:
    # Go struct order; every field omitempty (zero values are left out).
    pairs: list[tuple[str, object]] = [
        ("id", d.id),
        ("index", d.index),
        ("count", d.count),
        ("devmem", d.devmem),
        ("devcore", d.devcore),
        ("type", d.type),
        ("numa", d.numa),
        ("mode", d.mode),
        ("migProfiles", [mig_profile_wire(p) for p in d.mig_profiles]),
        ("health", d.health),
    ]
    return {k: v for k, v in pairs if v}


def encode_node_devices(devices: Iterable[DeviceInfo]) -> str:
    """The ``hami.io/node-nvidia-register`` JSON value, byte-exact with HAMi's ``MarshalNodeDevices``."""
    return _go_json([_device_wire(d) for d in devices])


def _jint(item: Mapping[str, object], key: str, i: int) -> int:
    value = item.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise AnnotationError(f"node register [{i}].{key}: expected an integer, got {value!r}")
    return value


def _jstr(item: Mapping[str, object], key: str, i: int) -> str:
    value = item.get(key, "")
    if not isinstance(value, str):
        raise AnnotationError(f"node register [{i}].{key}: expected a string, got {value!r}")
    return value


def _wint(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AnnotationError(f"{where}: expected a non-negative integer, got {value!r}")
    return value


def decode_mig_profiles(raw: object, where: str) -> tuple[MigProfile, ...]:
    """``migProfiles`` as HAMi's register JSON writes it (``None`` -> none); errors name ``where``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise AnnotationError(f"{where}: expected a JSON array")
    out: list[MigProfile] = []
    for k, p in enumerate(raw):
        at = f"{where}[{k}]"
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise AnnotationError(f"{at}: expected an object with a string name")
        places = p.get("placements") or []
        if not isinstance(places, list) or not all(isinstance(x, dict) for x in places):
            raise AnnotationError(f"{at}.placements: expected an array of objects")
        out.append(
            MigProfile(
                name=p["name"],
                memory_mb=_wint(p.get("memoryMB", 0), f"{at}.memoryMB"),
                core=_wint(p.get("core", 0), f"{at}.core"),
                slice_count=_wint(p.get("sliceCount", 0), f"{at}.sliceCount"),
                placements=tuple(
                    decode_mig_placement(x, f"{at}.placements[{n}]") for n, x in enumerate(places)
                ),
            )
        )
    return tuple(out)


def decode_mig_placement(raw: object, where: str) -> MigPlacement:
    """``{"start": N, "size": N}``; errors name ``where``."""
    if not isinstance(raw, dict):
        raise AnnotationError(f"{where}: expected an object")
    start = _wint(raw.get("start", 0), f"{where}.start")
    return MigPlacement(start=start, size=_wint(raw.get("size", 0), f"{where}.size"))


def decode_node_devices(value: str) -> tuple[DeviceInfo, ...]:
    """The JSON register form; missing fields take Go zero values (``mode`` "", ``health`` false)."""
    try:
        items = json.loads(value)
    except ValueError as e:
        raise AnnotationError(f"node register: invalid JSON: {e}") from None
    if items is None:
        return ()
    if not isinstance(items, list):
        raise AnnotationError("node register: expected a JSON array")
    out: list[DeviceInfo] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise AnnotationError(f"node register [{i}]: expected an object")
        health = item.get("health", False)
        if not isinstance(health, bool):
            raise AnnotationError(f"node register [{i}].health: expected a boolean, got {health!r}")
        out.append(
            DeviceInfo(
                id=DeviceUUID(_jstr(item, "id", i)),
                index=_jint(item, "index", i),
                count=_jint(item, "count", i),
                devmem=_jint(item, "devmem", i),
                devcore=_jint(item, "devcore", i),
                type=_jstr(item, "type", i),
                numa=_jint(item, "numa", i),
                mode=_jstr(item, "mode", i),
                health=health,
                mig_profiles=decode_mig_profiles(
                    item.get("migProfiles"), f"node register [{i}].migProfiles"
                ),
            )
        )
    return tuple(out)


_GO_DECIMAL = re.compile(r"[+-]?[0-9]+")


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _legacy_int(text: str, field: str, func: str, bits: int) -> int:
    """Go's ``strconv.ParseInt(s, 10, bits)`` / ``Atoi``; a failure names the field as v2.10 does."""
    if _GO_DECIMAL.fullmatch(text) is None:
        raise AnnotationError(
            f"invalid {field} field: strconv.{func}: parsing {_go_quote(text)}: invalid syntax"
        )
    value = int(text, 10)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise AnnotationError(
            f"invalid {field} field: strconv.{func}: parsing {_go_quote(text)}: value out of range"
        )
    return value


def _legacy_device(f: list[str]) -> DeviceInfo:
    """One ``id,count,devmem,devcore,type,numa,health[,index,mode]`` segment, fields checked in
    HAMi v2.10's order (``pkg/device/devices.go`` ``DecodeNodeDevices``)."""
    count = _legacy_int(f[1], "count", "ParseInt", 32)
    devmem = _legacy_int(f[2], "memory", "ParseInt", 32)
    devcore = _legacy_int(f[3], "core", "ParseInt", 32)
    health = parse_bool(f[6])
    if health is None:
        raise AnnotationError(
            f"invalid health field: strconv.ParseBool: parsing {_go_quote(f[6])}: invalid syntax"
        )
    numa = _legacy_int(f[5], "numa", "Atoi", 64)
    index, mode = 0, DeviceMode.HAMI_CORE.value
    if len(f) == 9:
        index, mode = _legacy_int(f[7], "index", "Atoi", 64), f[8]
        if index < 0:
            raise AnnotationError(f"index field must not be negative: {index}")
    return DeviceInfo(
        id=DeviceUUID(f[0]),
        count=count,
        devmem=devmem,
        devcore=devcore,
        type=f[4],
        numa=numa,
        health=health,
        index=index,
        mode=mode,
    )


def decode_node_devices_legacy(value: str) -> tuple[DeviceInfo, ...]:
    """The pre-v2.8 colon form ``id,count,devmem,devcore,type,numa,health[,index,mode]:`` per device.

    Every malformed part is an error naming it, with HAMi v2.10's words (``invalid count field:
    strconv.ParseInt: parsing "x": invalid syntax``); earlier HAMi read such a field as 0.
    """
    if ":" not in value:
        raise AnnotationError("node annotation missing device separator")
    out: list[DeviceInfo] = []
    for chunk in value.split(":"):
        if chunk == "":
            continue
        if "," not in chunk:
            raise AnnotationError(f"malformed node annotation segment: {_go_quote(chunk)}")
        f = chunk.split(",")
        if len(f) not in (7, 9):
            raise AnnotationError(f"unexpected field count {len(f)} in node annotation")
        out.append(_legacy_device(f))
    return tuple(out)


def decode_node_register(value: str) -> tuple[DeviceInfo, ...]:
    """Either form: JSON when the value is a JSON array, the legacy colon form otherwise."""
    if value.lstrip().startswith(("[", "null")):
        return decode_node_devices(value)
    return decode_node_devices_legacy(value)


def decode_pair_scores(value: str) -> dict[str, dict[str, int]]:
    """``[{"uuid": "GPU-0", "score": {"GPU-1": 50}}]`` -> ``{"GPU-0": {"GPU-1": 50}}``."""
    try:
        items = json.loads(value)
    except ValueError as e:
        raise AnnotationError(f"{NODE_SCORE}: invalid JSON: {e}") from None
    out: dict[str, dict[str, int]] = {}
    for item in items if isinstance(items, list) else [None]:
        if not isinstance(item, dict) or not isinstance(item.get("uuid"), str):
            raise AnnotationError(f"{NODE_SCORE}: expected objects with a string uuid")
        scores = item.get("score") or {}
        if not isinstance(scores, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in scores.values()
        ):
            raise AnnotationError(f"{NODE_SCORE}: score must map UUIDs to integers")
        out[item["uuid"]] = {str(k): int(v) for k, v in scores.items()}
    return out


def parse_list(value: str | None) -> tuple[str, ...]:
    """A comma list as HAMi reads it: members trimmed, empty members ignored."""
    if not value:
        return ()
    return tuple(p.strip() for p in value.split(",") if p.strip())


def parse_bool(value: str) -> bool | None:
    """Go's ``strconv.ParseBool``; ``None`` when it would fail."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    return None


# --- MIG allocations ---------------------------------------------------------------------------


def encode_mig_allocations(devices: PodDevices) -> str:
    """``hami.io/vgpu-mig-allocations`` (HAMi ``EncodeMigAllocations``): one entry per MIG card,
    ``containerIndex`` over init then app slots; "" when the pod holds no MIG instance."""
    out = [
        {
            "containerIndex": n,
            "deviceIndex": k,
            "gpuUUID": d.uuid,
            "profile": d.mig.profile,
            "placement": {"start": d.mig.placement.start, "size": d.mig.placement.size},
        }
        for n, slot in enumerate(devices)
        for k, d in enumerate(slot)
        if d.mig is not None
    ]
    return _go_json(out) if out else ""


def decode_mig_allocations(value: str) -> dict[tuple[int, int], tuple[DeviceUUID, MigSlice]]:
    """(containerIndex, deviceIndex) -> (GPU, slice), with HAMi ``DecodeMigAllocations``'s checks:
    complete entries, all three runtime fields or none, no (container, device) twice."""
    if value == "":
        return {}
    try:
        items = json.loads(value)
    except ValueError as e:
        raise AnnotationError(f"{MIG_ALLOCATIONS}: invalid JSON: {e}") from None
    if not isinstance(items, list):
        raise AnnotationError(f"{MIG_ALLOCATIONS}: expected a JSON array")
    out: dict[tuple[int, int], tuple[DeviceUUID, MigSlice]] = {}
    for i, item in enumerate(items):
        (ctr, dev), held = _mig_entry(item, i)
        if (ctr, dev) in out:
            raise AnnotationError(f"duplicate MIG allocation for container {ctr} device {dev}")
        out[ctr, dev] = held
    return out


_MIG_RUNTIME = ("migUUID", "gpuInstanceID", "computeInstanceID")


def _mig_entry(item: object, i: int) -> tuple[tuple[int, int], tuple[DeviceUUID, MigSlice]]:
    incomplete = AnnotationError(f"MIG allocation {i} is incomplete")
    if not isinstance(item, dict):
        raise incomplete
    place = item.get("placement")
    if not isinstance(place, dict):
        raise incomplete
    try:
        ctr, dev = _jint(item, "containerIndex", i), _jint(item, "deviceIndex", i)
        start, size = _jint(place, "start", i), _jint(place, "size", i)
        gpu, profile = _jstr(item, "gpuUUID", i), _jstr(item, "profile", i)
    except AnnotationError:
        raise incomplete from None
    if ctr < 0 or dev < 0 or start < 0 or not gpu or not profile or size <= 0:
        raise incomplete
    runtime = sum(1 for k in _MIG_RUNTIME if item.get(k) not in (None, ""))
    if runtime not in (0, 3):
        raise AnnotationError(f"MIG allocation {i} has partial runtime identity")
    held = MigSlice(profile=profile, placement=MigPlacement(start=start, size=size))
    return (ctr, dev), (DeviceUUID(gpu), held)


# --- usage ---------------------------------------------------------------------------------------


def collapse_usage(devices: PodDevices, init_count: int = 0) -> dict[DeviceUUID, DeviceUsage]:
    """A pod's per-device usage: init slots give the per-device max (1 slot), app slots are summed.

    The effective usage per device is the field-wise max of the two, in UUID order. Every MIG
    instance of the pod holds its placement (init and app alike: each is a real GPU instance).
    """
    init: dict[DeviceUUID, list[int]] = {}
    app: dict[DeviceUUID, list[int]] = {}
    mig: dict[DeviceUUID, list[MigPlacement]] = {}
    for n, slot in enumerate(devices):
        for d in slot:
            if d.mig is not None:
                mig.setdefault(d.uuid, []).append(d.mig.placement)
            if n < init_count:
                cur = init.setdefault(d.uuid, [1, 0, 0])
                cur[1], cur[2] = max(cur[1], d.usedmem), max(cur[2], d.usedcores)
            else:
                cur = app.setdefault(d.uuid, [0, 0, 0])
                cur[0], cur[1], cur[2] = cur[0] + 1, cur[1] + d.usedmem, cur[2] + d.usedcores
    out: dict[DeviceUUID, DeviceUsage] = {}
    for uuid in sorted(init.keys() | app.keys()):
        i, a = init.get(uuid, [0, 0, 0]), app.get(uuid, [0, 0, 0])
        out[uuid] = DeviceUsage(
            used=max(i[0], a[0], 1),
            usedmem=max(i[1], a[1]),
            usedcores=max(i[2], a[2]),
            mig=tuple(mig.get(uuid, ())),
        )
    return out
