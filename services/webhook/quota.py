"""Namespace ResourceQuota limits on GPU memory and cores, and whether one pod fits them (pure).

HAMi's keys: ``limits.<memory resource>`` (MiB, before ``memoryFactor``) and ``limits.<cores
resource>`` (% of a card) in ``spec.hard``. Every ResourceQuota object is enforced on its own, so the
tightest one decides. A pod's demand is per card x card count, and init containers run before the
app containers: ``max(sum over app containers, max over init containers)``. The webhook does not
keep the allocation ledger, so ``used`` is what the quota's ``status.used`` reports (0 if absent);
the scheduler repeats the check against its ledger at Fit time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from shared.model import ContainerSpec
from shared.requests import ResourceNames, parse_quantity

LIMITS_PREFIX = "limits."


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaLimit:
    """One ``limits.<resource>`` entry of one ResourceQuota object."""

    quota: str
    """Name of the ResourceQuota object (for the message)."""
    resource: str
    """The GPU resource name without the ``limits.`` prefix, e.g. ``nvidia.com/gpumem``."""
    hard: int
    used: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaView:
    """The GPU quota entries of one namespace as the webhook last read them."""

    limits: tuple[QuotaLimit, ...] = ()
    unknown: bool = False
    """True when the quotas could not be read: admission goes on without the check, with a warning."""

    @classmethod
    def from_resource_quotas(cls, items: Iterable[Mapping[str, object]], names: ResourceNames) -> QuotaView:
        """ResourceQuota objects (Kubernetes JSON) -> the entries for ``names``' memory and cores."""
        managed = {names.memory, names.cores} - {""}
        limits: list[QuotaLimit] = []
        for item in items:
            meta, spec, status = (_map(item.get(k)) for k in ("metadata", "spec", "status"))
            used = _map(status.get("used"))
            for key, raw in _map(spec.get("hard")).items():
                resource = key.removeprefix(LIMITS_PREFIX)
                if not key.startswith(LIMITS_PREFIX) or resource not in managed:
                    continue
                hard = _quantity(raw)
                if hard is not None:
                    limits.append(
                        QuotaLimit(
                            quota=str(meta.get("name", "")),
                            resource=resource,
                            hard=hard,
                            used=_quantity(used.get(key)) or 0,
                        )
                    )
        return cls(limits=tuple(limits))


NO_QUOTA = QuotaView()


@dataclass(frozen=True, slots=True, kw_only=True)
class PodDemand:
    """What one pod needs of the quota: MiB (after ``memoryFactor``) and cores, over all its cards."""

    memory: int
    cores: int


def pod_demand(containers: Sequence[ContainerSpec]) -> PodDemand:
    """max(sum over app containers, max over init containers) of per-card value x card count."""
    app_mem = app_cores = init_mem = init_cores = 0
    for c in containers:
        if c.request is None:
            continue
        mem, cores = c.request.memreq * c.request.nums, c.request.coresreq * c.request.nums
        if c.init:
            init_mem, init_cores = max(init_mem, mem), max(init_cores, cores)
        else:
            app_mem, app_cores = app_mem + mem, app_cores + cores
    return PodDemand(memory=max(app_mem, init_mem), cores=max(app_cores, init_cores))


def exceeded(view: QuotaView, demand: PodDemand, names: ResourceNames) -> QuotaLimit | None:
    """The first quota entry the pod would exceed, or None when it fits all of them."""
    factor = max(names.memory_factor, 1)
    for limit in view.limits:
        if limit.resource == names.memory:
            over = limit.used * factor + demand.memory > limit.hard * factor
        else:
            over = limit.used + demand.cores > limit.hard
        if over:
            return limit
    return None


def _map(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _quantity(raw: object) -> int | None:
    try:
        return parse_quantity(raw)
    except ValueError:
        return None
