"""Namespace ResourceQuotas on GPU memory and cores as Fit checks them (HAMi §4, check 10). Pure.

HAMi tracks only ``limits.<memory resource>`` (MiB per the quota, compared after ``memoryFactor``)
and ``limits.<cores resource>`` in a ResourceQuota's ``spec.hard``; an explicit 0 blocks every GPU
pod. Every ResourceQuota object is enforced on its own, so the tightest one per resource decides.
What a namespace already uses comes from the ledger (each pod collapsed: init max vs app sum),
never from the quota's ``status.used`` (Kubernetes counts per card, not per card x count).

Owns parsing quota objects and building Fit's :class:`~services.scheduler.fit.Quota`; must not
know I/O, NATS, HTTP or where the quota objects come from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.scheduler.fit import Quota
from shared.requests import ResourceNames, parse_quantity

LIMITS_PREFIX = "limits."


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaLimit:
    """The tightest ``limits.<resource>`` over a namespace's ResourceQuota objects."""

    resource: str
    """The GPU resource name without ``limits.``, e.g. ``nvidia.com/gpumem`` (HAMi's ``quota_name``)."""
    hard: int
    """The limit as written in the quota (memory: MiB before ``memoryFactor``)."""
    quota: str
    """Name of the ResourceQuota object that sets it (for logs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NamespaceQuota:
    """A namespace's GPU quota; ``None`` limits are not enforced."""

    memory: QuotaLimit | None = None
    cores: QuotaLimit | None = None
    invalid: tuple[str, ...] = ()
    """``<quota>: <key>=<value>`` entries that are not integer quantities (ignored, counted)."""

    @property
    def enforced(self) -> bool:
        return self.memory is not None or self.cores is not None

    def limits(self) -> tuple[QuotaLimit, ...]:
        return tuple(q for q in (self.memory, self.cores) if q is not None)


NO_QUOTA = NamespaceQuota()


def _map(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _tighter(held: QuotaLimit | None, new: QuotaLimit) -> QuotaLimit:
    return new if held is None or new.hard < held.hard else held


def parse_quotas(items: Iterable[Mapping[str, object]], names: ResourceNames) -> NamespaceQuota:
    """ResourceQuota objects (Kubernetes JSON) -> the tightest memory and cores limits."""
    found: dict[str, QuotaLimit] = {}
    invalid: list[str] = []
    managed = {names.memory, names.cores} - {""}
    for item in items:
        quota = str(_map(item.get("metadata")).get("name", ""))
        for key, raw in _map(_map(item.get("spec")).get("hard")).items():
            resource = key.removeprefix(LIMITS_PREFIX)
            if not key.startswith(LIMITS_PREFIX) or resource not in managed:
                continue
            try:
                hard = parse_quantity(raw)
            except ValueError:
                invalid.append(f"{quota}: {key}={raw!r}")
                continue
            limit = QuotaLimit(resource=resource, hard=hard, quota=quota)
            found[resource] = _tighter(found.get(resource), limit)
    return NamespaceQuota(
        memory=found.get(names.memory), cores=found.get(names.cores), invalid=tuple(invalid)
    )


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
