"""The GPU entries of ResourceQuota objects: HAMi's ``spec.hard`` keys, parsed once for every reader.

HAMi tracks only ``limits.<memory resource>`` (MiB, before ``memoryFactor``) and ``limits.<cores
resource>`` (% of a card) in a ResourceQuota's ``spec.hard``; other keys (``requests.``, other
resources) are not GPU quota. Every ResourceQuota object is enforced on its own, so this keeps one
:class:`QuotaLimit` per object and resource; what a reader does with them (the webhook checks each,
the scheduler keeps the tightest) is the reader's. A limit that is not an integer quantity is
listed in :attr:`ParsedQuotas.invalid`, never raised: the object comes from the API server.

Pure; must not know the Kubernetes client, the cache or either service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.requests import ResourceNames, parse_quantity

LIMITS_PREFIX = "limits."


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaLimit:
    """One ``limits.<resource>`` entry of one ResourceQuota object."""

    quota: str
    """Name of the ResourceQuota object (for messages and metrics)."""
    resource: str
    """The GPU resource name without ``limits.``, e.g. ``nvidia.com/gpumem`` (HAMi's ``quota_name``)."""
    hard: int
    """The limit as written (memory: MiB before ``memoryFactor``)."""
    used: int = 0
    """The object's ``status.used`` for the key (0 if absent or not a quantity). Kubernetes counts it
    per card, not per card x count, so only the webhook (which keeps no ledger) reads it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ParsedQuotas:
    """The GPU quota entries of a namespace's ResourceQuota objects, in the order listed."""

    limits: tuple[QuotaLimit, ...] = ()
    invalid: tuple[str, ...] = ()
    """``<quota>: <key>=<value>`` entries whose limit is not an integer quantity (ignored)."""


def parse_resource_quotas(items: Iterable[Mapping[str, object]], names: ResourceNames) -> ParsedQuotas:
    """ResourceQuota objects (Kubernetes JSON) -> their ``limits.<memory|cores resource>`` entries."""
    managed = {names.memory, names.cores} - {""}
    limits: list[QuotaLimit] = []
    invalid: list[str] = []
    for item in items:
        quota = str(_map(item.get("metadata")).get("name", ""))
        used = _map(_map(item.get("status")).get("used"))
        for key, raw in _map(_map(item.get("spec")).get("hard")).items():
            resource = key.removeprefix(LIMITS_PREFIX)
            if not key.startswith(LIMITS_PREFIX) or resource not in managed:
                continue
            hard = _quantity(raw)
            if hard is None:
                invalid.append(f"{quota}: {key}={raw!r}")
                continue
            used_now = _quantity(used.get(key)) or 0
            limits.append(QuotaLimit(quota=quota, resource=resource, hard=hard, used=used_now))
    return ParsedQuotas(limits=tuple(limits), invalid=tuple(invalid))


def _map(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _quantity(raw: object) -> int | None:
    try:
        return parse_quantity(raw)
    except ValueError:
        return None
