"""Request derivation: a Kubernetes pod (plain JSON dict) -> :class:`PodRequest`, exactly as HAMi does it.

API:
    ResourceNames                 settings: resource names, defaultMemory/Cores/GPUNum, memoryFactor
    DEFAULT_NAMES                 the HAMi chart defaults
    parse_quantity(raw) -> int    exact integer value of a Kubernetes quantity (str, int or integral float),
                                  within int64; text of at most 40 digits and an exponent within +-40
    checked_quantity(container, resource, raw, *, upper) -> int   0..upper, else InvalidQuantity
    container_request(container, names, *, name) -> ContainerRequest | None
    pod_request(pod, names=DEFAULT_NAMES) -> PodRequest   (init containers first, then app containers)
    InvalidQuantity               RequestError naming container, resource and value

Rules (HAMi ``GenerateResourceRequests``): for each resource limits win over requests; ``nums`` = count
(memory, percentage or cores without a count imply ``default_gpu_num`` cards, as HAMi's webhook adds it);
``memreq`` = gpumem x memoryFactor; percentage > 100 clamps to 100, <= 0 stays 101 (unset); with neither
memory nor percentage: ``default_memory`` if set, else 100 % of the card; cores default to
``default_cores``. Where HAMi silently drops a request with a bad quantity, gpubus raises
:class:`InvalidQuantity` instead. This module must not know about Fit, annotations or any I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from shared.codec import INT_MAX
from shared.errors import RequestError, clip
from shared.model import PERCENT_UNSET, ContainerRequest, ContainerSpec, PodRequest, PodUID

MAX_INT32 = 2**31 - 1
#: Kubernetes' ``Quantity.Value()`` is an int64; nothing larger is an amount of anything here.
MAX_INT64 = INT_MAX
#: Checked on the text before any arithmetic: "1e30000000" is 11 bytes but a 30-million-digit
#: integer (seconds of CPU, then an int too long to print). Every int64 fits well inside both.
MAX_EXPONENT = 40
MAX_DIGITS = 40

# ASCII digits only ([0-9], not \d): Kubernetes quantities are ASCII, so fullwidth or
# Arabic-Indic digits are not numbers.
_QUANTITY = re.compile(
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIX = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceNames:
    """The device config (HAMi ``nvidia:`` section) that request derivation depends on."""

    count: str = "nvidia.com/gpu"
    """Cards per container (HAMi resourceCountName)."""
    memory: str = "nvidia.com/gpumem"
    """MiB per card (resourceMemoryName)."""
    memory_percentage: str = "nvidia.com/gpumem-percentage"
    """% of each card's registered memory (resourceMemoryPercentageName)."""
    cores: str = "nvidia.com/gpucores"
    """% of SMs per card (resourceCoreName)."""
    priority: str = "nvidia.com/priority"
    """Task priority (resourcePriorityName); not part of the request."""
    default_memory: int = 0
    """MiB given when neither memory nor percentage is requested (defaultMemory; 0 = whole card)."""
    default_cores: int = 0
    """Cores given when none are requested (defaultCores)."""
    default_gpu_num: int = 1
    """Cards implied by a memory/cores request without a count (defaultGPUNum)."""
    memory_factor: int = 1
    """The gpumem value is multiplied by this (memoryFactor)."""


#: Alias kept for readers who think of the defaults rather than the names.
RequestDefaults = ResourceNames
DEFAULT_NAMES = ResourceNames()


class InvalidQuantity(RequestError):
    """A GPU resource quantity of one container cannot be used."""

    def __init__(self, container: str, resource: str, value: object, why: str) -> None:
        super().__init__(f"container {container!r}: {resource}={_shown(value)} is invalid: {why}")
        self.container = container
        self.resource = resource
        self.value = value


def _shown(value: object) -> str:
    """The value as a message shows it, bounded: it came from the request, and a huge int has no repr."""
    if isinstance(value, int) and abs(value) > MAX_INT64:
        return f"<{value.bit_length()}-bit integer>"
    return clip(repr(value), 80)


def parse_quantity(raw: object) -> int:
    """The exact integer value of a Kubernetes quantity within int64; ``ValueError`` if it has none."""
    if isinstance(raw, bool):
        raise ValueError("not a quantity")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float):
        if not raw.is_integer():
            raise ValueError("not an integer")
        value = int(raw)
    elif isinstance(raw, str):
        value = _parse_text(raw)
    else:
        raise ValueError("not a quantity")
    if abs(value) > MAX_INT64:
        raise ValueError(f"out of range (magnitude above {MAX_INT64})")
    return value


def _parse_text(raw: str) -> int:
    m = _QUANTITY.match(raw.strip())
    if m is None:
        raise ValueError("not a quantity")
    sign, digits, exponent, suffix = m.groups()
    # Bounded before computing, so that hostile text is refused in microseconds.
    if len(digits) > MAX_DIGITS or len(exponent or "") > MAX_DIGITS:
        raise ValueError(f"more than {MAX_DIGITS} digits")
    if exponent is not None and abs(int(exponent)) > MAX_EXPONENT:
        raise ValueError(f"exponent {int(exponent)} out of range (at most {MAX_EXPONENT} either way)")
    value = Fraction(digits)
    if exponent is not None:
        value *= Fraction(10) ** int(exponent)
    if suffix:
        value *= _SUFFIX[suffix]
    if value.denominator != 1:
        raise ValueError("not an integer")
    return -int(value) if sign == "-" else int(value)


def checked_quantity(container: str, resource: str, raw: object, *, upper: int = MAX_INT32) -> int:
    """A GPU resource's value in 0..``upper`` (int32 by default: HAMi's wire and HAMi-core's C ints)."""
    try:
        value = parse_quantity(raw)
    except ValueError as e:
        raise InvalidQuantity(container, resource, raw, str(e)) from None
    if value < 0:
        raise InvalidQuantity(container, resource, raw, "negative")
    if value > upper:
        raise InvalidQuantity(container, resource, raw, f"exceeds {upper}")
    return value


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def container_request(
    container: Mapping[str, object], names: ResourceNames = DEFAULT_NAMES, *, name: str = ""
) -> ContainerRequest | None:
    """The GPU request of one container spec, or ``None`` when it asks for no GPU."""
    resources = _mapping(container.get("resources"), f"container {name!r}: resources")
    limits = _mapping(resources.get("limits"), f"container {name!r}: resources.limits")
    requests = _mapping(resources.get("requests"), f"container {name!r}: resources.requests")

    def pick(resource: str) -> object | None:
        return limits.get(resource, requests.get(resource))

    count_raw, mem_raw = pick(names.count), pick(names.memory)
    pct_raw, core_raw = pick(names.memory_percentage), pick(names.cores)
    if count_raw is None:
        if mem_raw is None and pct_raw is None and core_raw is None:
            return None
        nums = names.default_gpu_num
    else:
        nums = checked_quantity(name, names.count, count_raw)
    if nums == 0:
        return None
    memreq = 0
    if mem_raw is not None:
        factor = max(names.memory_factor, 1)
        memreq = checked_quantity(name, names.memory, mem_raw, upper=MAX_INT32 // factor) * factor
    pct = PERCENT_UNSET
    if pct_raw is not None:
        try:
            given = parse_quantity(pct_raw)
        except ValueError as e:
            raise InvalidQuantity(name, names.memory_percentage, pct_raw, str(e)) from None
        if given > 0:  # HAMi: <= 0 is logged and treated as unset
            pct = min(given, 100)
    if pct == PERCENT_UNSET and memreq == 0:
        if names.default_memory:
            memreq = names.default_memory
        else:
            pct = 100
    cores = names.default_cores if core_raw is None else checked_quantity(name, names.cores, core_raw)
    return ContainerRequest(nums=nums, memreq=memreq, mempercentagereq=pct, coresreq=cores)


def _containers(spec: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
    raw = spec.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RequestError(f"spec.{key}: expected a list, got {type(raw).__name__}")
    out: list[Mapping[str, object]] = []
    for i, c in enumerate(raw):
        out.append(_mapping(c, f"spec.{key}[{i}]"))
    return out


def pod_request(pod: Mapping[str, object], names: ResourceNames = DEFAULT_NAMES) -> PodRequest:
    """Every container of a pod in slot order (init first) with its GPU request."""
    meta = _mapping(pod.get("metadata"), "metadata")
    spec = _mapping(pod.get("spec"), "spec")
    annotations = _mapping(meta.get("annotations"), "metadata.annotations")
    specs: list[ContainerSpec] = []
    for key, init in (("initContainers", True), ("containers", False)):
        for i, c in enumerate(_containers(spec, key)):
            cname = c.get("name", f"{key}[{i}]")
            if not isinstance(cname, str):
                raise RequestError(f"spec.{key}[{i}].name: expected a string")
            specs.append(
                ContainerSpec(name=cname, init=init, request=container_request(c, names, name=cname))
            )
    return PodRequest(
        namespace=_text(meta, "namespace", "default"),
        name=_text(meta, "name", ""),
        uid=PodUID(_text(meta, "uid", "")),
        containers=tuple(specs),
        annotations=_annotations(annotations),
    )


def _text(meta: Mapping[str, object], key: str, default: str) -> str:
    value = meta.get(key)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise RequestError(f"metadata.{key}: expected a string, got {type(value).__name__}")
    return value


def _annotations(raw: Mapping[str, object]) -> dict[str, str]:
    """Annotation values are strings on the wire; anything else is refused, naming the key."""
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            kind = type(value).__name__
            raise RequestError(f"metadata.annotations[{key!r}]: expected a string, got {kind}")
        out[key] = value
    return out
