"""Namespace ResourceQuotas on GPU memory and cores as Fit checks them (HAMi §4, check 10). Pure.

HAMi tracks only ``limits.<memory resource>`` (MiB per the quota, compared after ``memoryFactor``)
and ``limits.<cores resource>`` in a ResourceQuota's ``spec.hard``; an explicit 0 blocks every GPU
pod. Every ResourceQuota object is enforced on its own, so the tightest one per resource decides.
What a namespace already uses comes from the ledger (each pod collapsed: init max vs app sum),
never from the quota's ``status.used`` (Kubernetes counts per card, not per card x count).

The quota objects come parsed from :mod:`shared.quota` (their ``status.used`` is not read here).
Owns reducing them to the tightest limits and building Fit's :class:`~services.scheduler.fit.Quota`;
must not know I/O, NATS, HTTP or where the quota objects come from.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.scheduler.fit import Quota
from shared.quota import ParsedQuotas, QuotaLimit
from shared.requests import ResourceNames

__all__ = ["NO_QUOTA", "NamespaceQuota", "QuotaLimit", "fit_quota", "namespace_quota"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceQuota:
    """A namespace's GPU quota: the tightest limit per resource; ``None`` limits are not enforced."""

    memory: QuotaLimit | None = None
    cores: QuotaLimit | None = None

    @property
    def enforced(self) -> bool:
        return self.memory is not None or self.cores is not None

    def limits(self) -> tuple[QuotaLimit, ...]:
        return tuple(q for q in (self.memory, self.cores) if q is not None)


NO_QUOTA = NamespaceQuota()


def namespace_quota(parsed: ParsedQuotas, *, names: ResourceNames) -> NamespaceQuota:
    """The tightest memory and cores limits of the namespace's parsed quotas."""
    found: dict[str, QuotaLimit] = {}
    for limit in parsed.limits:
        held = found.get(limit.resource)
        if held is None or limit.hard < held.hard:
            found[limit.resource] = limit
    return NamespaceQuota(memory=found.get(names.memory), cores=found.get(names.cores))


def fit_quota(
    limits: NamespaceQuota, used: tuple[int, int], own: tuple[int, int], factor: int
) -> Quota | None:
    """Fit's quota input: ``used`` (MiB, cores) of the namespace minus the pod's ``own`` entry, if any
    (a re-filtered or re-bound pod must not count against itself); None when nothing is enforced."""
    if not limits.enforced:
        return None
    return Quota(
        memory_limit=None if limits.memory is None else limits.memory.hard,
        cores_limit=None if limits.cores is None else limits.cores.hard,
        memory_used=used[0] - own[0],
        cores_used=used[1] - own[1],
        memory_factor=max(factor, 1),
    )
