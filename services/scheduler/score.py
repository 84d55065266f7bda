"""Scores and orderings: which device a container takes first, which node a pod goes to (HAMi §3b, §3c).

API:
    GpuPolicy, NodePolicy                 the policy words
    ScoringWeights, parse_scoring_weights(value) -> ScoringWeights   (``hami.io/device-scoring-weights``)
    policy_chain(value) -> tuple[str, ...]; policy_contains(chain, name)
    device_score(dev, used, usedmem, usedcores, request, weights) -> float
    device_order(chain, numa_bind) -> key(score, numa, used, index) -> tuple   (Fit scans from the END)
    node_score(devices, usage) -> float   computed before the pod is placed
    best_node(fits, policy) -> name | None; rank_nodes(fits, policy) -> best first
    pick_topology(candidates, k, pair_scores) -> chosen candidate positions

Pure arithmetic over model values; must not know about annotations' wire form beyond the weights
string, nor about Fit's checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations

from shared.annotations import DEVICE_SCORING_WEIGHTS
from shared.errors import AnnotationError
from shared.model import PERCENT_UNSET, ContainerRequest, DeviceInfo, DeviceUsage


class GpuPolicy(StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"
    NUMA = "numa"
    MUTEX = "mutex"
    TOPOLOGY = "topology-aware"


class NodePolicy(StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoringWeights:
    """Weights of the slot, core and memory terms of the device score (HAMi default 1,1,1)."""

    slot: int = 1
    core: int = 1
    memory: int = 1


DEFAULT_WEIGHTS = ScoringWeights()
#: The largest weight a pod may ask for; larger ones only overflow the score arithmetic.
WEIGHT_MAX = 1_000_000
_WEIGHT_DIGITS = len(str(WEIGHT_MAX))


def parse_scoring_weights(value: str | None) -> ScoringWeights:
    """``slot=A,core=B,memory=C``: all three keys, any order, integers >= 0, at least one > 0."""
    if value is None:
        return DEFAULT_WEIGHTS
    found: dict[str, int] = {}
    for part in value.split(","):
        key, sep, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or key not in ("slot", "core", "memory") or key in found:
            raise AnnotationError(
                f"{DEVICE_SCORING_WEIGHTS}={value!r}: bad or repeated key in {part.strip()!r}"
            )
        # ASCII only (str.isdigit() also passes "²", which int() refuses); the length is checked
        # before int(), which refuses over 4300 digits
        digits = raw.lstrip("0") or "0"
        if not (raw.isascii() and raw.isdigit()) or len(digits) > _WEIGHT_DIGITS or int(digits) > WEIGHT_MAX:
            raise AnnotationError(
                f"{DEVICE_SCORING_WEIGHTS}={value!r}: {key} must be an integer from 0 to {WEIGHT_MAX}"
            )
        found[key] = int(digits)
    if len(found) != 3:
        raise AnnotationError(f"{DEVICE_SCORING_WEIGHTS}={value!r}: slot, core and memory are all required")
    if not any(found.values()):
        raise AnnotationError(f"{DEVICE_SCORING_WEIGHTS}={value!r}: at least one weight must be > 0")
    return ScoringWeights(**found)


def policy_chain(value: str) -> tuple[str, ...]:
    """A GPU policy value split on ``,`` and trimmed (``"binpack, numa"`` -> ``("binpack", "numa")``)."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


def policy_contains(chain: Sequence[str], name: str) -> bool:
    return name in chain


def device_score(
    dev: DeviceInfo,
    used: int,
    usedmem: int,
    usedcores: int,
    *,
    request: ContainerRequest | None,
    weights: ScoringWeights = DEFAULT_WEIGHTS,
) -> float:
    """``10*(Ws*(req+Used)/Count + Wc*(core+Usedcores)/Totalcore + Wm*(mem+Usedmem)/Totalmem)``.

    The request term counts only when ``request.type == dev.type`` (HAMi compares the vendor word
    with the model, so in production it is 0).
    """
    if dev.count == 0 or dev.devcore == 0 or dev.devmem == 0:
        return 0.0
    req = core = mem = 0
    if request is not None and request.type == dev.type:
        req, core = 1, request.coresreq
        pct = request.mempercentagereq
        mem = dev.devmem * pct // 100 if pct not in (0, PERCENT_UNSET) else request.memreq
    return 10 * (
        weights.slot * (req + used) / dev.count
        + weights.core * (core + usedcores) / dev.devcore
        + weights.memory * (mem + usedmem) / dev.devmem
    )


_KEYS: dict[str, Callable[[float, int, int, int], float]] = {
    "score_asc": lambda s, n, u, i: s,
    "score_desc": lambda s, n, u, i: -s,
    "numa_asc": lambda s, n, u, i: n,
    "numa_desc": lambda s, n, u, i: -n,
    "used_desc": lambda s, n, u, i: -u,
    "index_asc": lambda s, n, u, i: i,
}
_CHAIN_KEY = {"binpack": "score_asc", "spread": "score_desc", "numa": "numa_asc"}
_SINGLE = {  # policy -> (keys, keys with numa-bind)
    "binpack": (("score_asc", "numa_asc"), ("numa_desc", "score_asc")),
    "mutex": (("used_desc", "numa_asc"), ("numa_asc", "used_desc")),
    "spread": (("score_desc", "numa_asc"), ("numa_asc", "score_desc")),
}


def order_keys(chain: Sequence[str], numa_bind: bool) -> tuple[str, ...]:
    """The sort keys, most significant first; the final tiebreak is the device index."""
    if len(chain) == 1 and chain[0] != "numa":
        plain, bound = _SINGLE.get(chain[0], _SINGLE["spread"])
        keys = list(bound if numa_bind else plain)
    else:
        keys = [_CHAIN_KEY[p] for p in chain if p in _CHAIN_KEY] or ["score_desc"]
        if numa_bind:
            keys = ["numa_asc", *(k for k in keys if k != "numa_asc")]
    return (*keys, "index_asc")


def device_order(
    chain: Sequence[str], numa_bind: bool
) -> Callable[[float, int, int, int], tuple[float, ...]]:
    """A sort key over ``(score, numa, used, index)``; Fit takes devices from the end of the sorted list."""
    fns = tuple(_KEYS[k] for k in order_keys(chain, numa_bind))
    return lambda s, n, u, i: tuple(f(s, n, u, i) for f in fns)


def node_score(devices: Sequence[DeviceInfo], usage: Sequence[DeviceUsage]) -> float:
    """``10*(ΣUsed/ΣCount + ΣUsedcores/ΣTotalcore + ΣUsedmem/ΣTotalmem)`` before placing the pod."""
    count = sum(d.count for d in devices)
    cores = sum(d.devcore for d in devices)
    mem = sum(d.devmem for d in devices)
    total = 0.0
    if count:
        total += sum(u.used for u in usage) / count
    if cores:
        total += sum(u.usedcores for u in usage) / cores
    if mem:
        total += sum(u.usedmem for u in usage) / mem
    return 10 * total


def best_node(fits: Sequence[tuple[str, float]], policy: str) -> str | None:
    """The node a pod goes to: binpack the highest score, spread the lowest; ties -> first name."""
    if not fits:
        return None
    target = min(s for _, s in fits) if policy == NodePolicy.SPREAD else max(s for _, s in fits)
    return min(n for n, s in fits if s == target)


def rank_nodes(fits: Sequence[tuple[str, float]], policy: str) -> list[tuple[str, float]]:
    """All fitting nodes, best first (same order :func:`best_node` uses)."""
    if policy == NodePolicy.SPREAD:
        return sorted(fits, key=lambda f: (f[1], f[0]))
    return sorted(fits, key=lambda f: (-f[1], f[0]))


def pick_topology(
    candidates: Sequence[str], k: int, pair_scores: Mapping[str, Mapping[str, int]]
) -> tuple[int, ...]:
    """Topology-aware choice among more candidates than requested (positions into ``candidates``).

    One card: the lowest sum of pair scores to the other candidates. Several: the C(n, k) combination
    (in candidate order) with the highest pairwise sum. First wins ties; missing scores count 0.
    """

    def pair(a: str, b: str) -> int:
        # the annotation lists each device's links; a link written on one side only still counts
        score = pair_scores.get(a, {}).get(b)
        return score if score is not None else pair_scores.get(b, {}).get(a, 0)

    if k == 1:
        # HAMi computeWorstSingleCard: a card's own other entries (MIG instances of it) do not count
        sums = [sum(pair(c, o) for o in candidates if o != c) for c in candidates]
        return (sums.index(min(sums)),)
    best: tuple[int, ...] = tuple(range(k))
    best_sum = -1
    for combo in combinations(range(len(candidates)), k):
        total = sum(pair(candidates[a], candidates[b]) for a, b in combinations(combo, 2))
        if total > best_sum:
            best, best_sum = combo, total
    return best
