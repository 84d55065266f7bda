"""The exact shortcut for pods with one GPU container and no filters (HAMi §3 fast path).

Such a pod asks every NVIDIA device the same request-independent questions (healthy, not cordoned,
a free slot) and then the same capacity questions, and each device is judged on its own, so
counting eligible devices over a node's precomputed free capacity gives the same verdict, and on
failure the same reason counts, as the full check chain in :mod:`services.scheduler.fit`.

Must not know about pods, policies or node annotations: callers hand in the request shape
(:func:`shape_key`) and the node's :class:`FreeCapacity`, and decide when the shortcut applies.
Pure: no I/O, no clocks.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.scheduler.reasons import Reason
from shared.model import NVIDIA, PERCENT_UNSET, ContainerRequest, DeviceInfo, DeviceUsage

MEMO_LIMIT = 256
"""Most results memoised per node; a node sees few distinct request shapes between usage changes."""

ShapeKey = tuple[int, int, int, int]
"""(nums, memreq, mempercentagereq, coresreq capped at 100): all the shortcut needs of a request."""

_KEYS: dict[ShapeKey, ShapeKey] = {}


class FreeCapacity:
    """A node's NVIDIA devices for the shortcut: the free capacity of the available ones, sorted by
    free memory (descending), and the request-independent reason counts of the others."""

    __slots__ = ("avail", "fixed", "max_free", "n_memfree", "n_nv")

    def __init__(
        self,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        nv: Sequence[int],
        cordon: frozenset[str],
    ) -> None:
        fixed: dict[str, int] = {}
        avail: list[tuple[int, int, int, int, int]] = []
        n_memfree = 0
        for i in nv:
            d, u = devices[i], usage[i]
            why = _unavailable(d, u, cordon)
            if why is not None:
                fixed[why] = fixed.get(why, 0) + 1
                continue
            free_mem = d.devmem - u.usedmem
            avail.append((free_mem, d.devcore - u.usedcores, u.used, d.devcore, d.devmem))
            if free_mem >= d.devmem:
                n_memfree += 1
        avail.sort(reverse=True)
        self.avail = tuple(avail)
        """(free memory, free cores, used slots, device cores, device memory) per available device."""
        self.fixed = fixed
        self.max_free = avail[0][0] if avail else -1
        self.n_memfree = n_memfree
        """Available devices with all their memory free (what a 100 % memory request needs)."""
        self.n_nv = len(nv)


def _unavailable(d: DeviceInfo, u: DeviceUsage, cordon: frozenset[str]) -> str | None:
    """The request-independent first failure of a device for a pod without filters."""
    if not d.health:
        return Reason.CARD_NOT_HEALTH
    if d.id in cordon:
        return Reason.CARD_CORDONED
    if d.count <= u.used:
        return Reason.CARD_TIME_SLICING_EXHAUSTED
    return None


def shape_key(req: ContainerRequest) -> ShapeKey | None:
    """The request's shape, or None when the shortcut cannot judge it (not an NVIDIA request)."""
    if req.type != NVIDIA:
        return None
    key = (req.nums, req.memreq, req.mempercentagereq, min(req.coresreq, 100))
    # one canonical tuple per request shape: memo lookups then hit on identity, not element compares
    if len(_KEYS) > 4096:
        _KEYS.clear()
    return _KEYS.setdefault(key, key)


def simple_fit(cap: FreeCapacity, n: int, m: int, pct: int, c: int) -> bool:
    """Whether ``n`` available devices each take ``m`` MiB (or ``pct`` % of theirs) and ``c`` cores."""
    if n > len(cap.avail):  # avail is a subset of the NVIDIA devices, so this covers "too few cards"
        return False
    fixed = m > 0 or pct == PERCENT_UNSET
    if fixed and cap.max_free < m:
        return False
    if not fixed and pct == 100 and cap.n_memfree < n:
        return False
    count = 0
    for free_mem, free_cores, used, devcore, devmem in cap.avail:
        need = m if fixed else devmem * pct // 100
        if free_mem < need:
            if fixed:
                break  # avail is sorted by free memory, descending
            continue
        if (
            free_cores < c
            or (c == 100 and devcore == 100 and used)
            or (c == 0 and devcore and not free_cores)
        ):
            continue
        count += 1
        if count == n:
            return True
    return False


def simple_reasons(cap: FreeCapacity, n: int, m: int, pct: int, c: int) -> dict[str, int]:
    """Exact reason counts for a failed single-container pod (every device gets scanned on failure)."""
    if n > cap.n_nv:
        return {Reason.NODE_INSUFFICIENT_DEVICE: 1}
    out = dict(cap.fixed)
    taken = 0
    fixed = m > 0 or pct == PERCENT_UNSET
    for free_mem, free_cores, used, devcore, devmem in cap.avail:
        if free_mem < (m if fixed else devmem * pct // 100):
            why: str | None = Reason.CARD_INSUFFICIENT_MEMORY
        elif free_cores < c:
            why = Reason.CARD_INSUFFICIENT_CORE
        elif c == 100 and devcore == 100 and used:
            why = Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        elif c == 0 and devcore and not free_cores:
            why = Reason.CARD_COMPUTE_UNITS_EXHAUSTED
        else:
            why, taken = None, taken + 1
        if why is not None:
            out[why] = out.get(why, 0) + 1
    if taken:
        out[Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = taken
    return out


def remember(memo: dict[object, object], key: object, value: object) -> None:
    """Store a result in a node's memo, emptying it first when it is full (bounded memory)."""
    if len(memo) >= MEMO_LIMIT:
        memo.clear()
    memo[key] = value
