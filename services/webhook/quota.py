"""Namespace ResourceQuota limits on GPU memory and cores, and whether one pod fits them (pure).

The entries come parsed from :mod:`shared.quota` (HAMi's ``limits.<memory|cores resource>`` keys of
``spec.hard``). Every ResourceQuota object is enforced on its own, so the
tightest one decides. A pod's demand is per card x card count, and init containers run before the
app containers: ``max(sum over app containers, max over init containers)``. The webhook does not
keep the allocation ledger, so ``used`` is what the quota's ``status.used`` reports (0 if absent);
the scheduler repeats the check against its ledger at Fit time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.model import ContainerSpec
from shared.quota import ParsedQuotas, QuotaLimit
from shared.requests import ResourceNames

__all__ = ["NO_QUOTA", "UNKNOWN", "PodDemand", "QuotaLimit", "QuotaView", "exceeded", "pod_demand"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaView:
    """The GPU quota entries of one namespace as the webhook last read them."""

    limits: tuple[QuotaLimit, ...] = ()
    unknown: bool = False
    """True when the quotas could not be read: admission goes on without the check, with a warning."""

    @classmethod
    def from_parsed(cls, parsed: ParsedQuotas) -> QuotaView:
        """Every entry of every object: each is enforced on its own, against its ``status.used``."""
        return cls(limits=parsed.limits)


NO_QUOTA = QuotaView()
UNKNOWN = QuotaView(unknown=True)


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

