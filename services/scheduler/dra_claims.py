"""DRA mode's ledger view: a pod's allocated gpubus claims as the :class:`Allocation` extender mode
would have decided, so ``allocation.decided`` reads the same in both modes (the monitor, the
dashboard and ``tap`` need not know which mode placed a pod).

kube-scheduler allocates the claims; this only describes them. Each container gets the cards of
the claims it names in ``resources.claims`` (one slot per container, init first, as in extender
mode), each card with the memory (MiB) and cores the claim consumes on it. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from shared import dra
from shared.model import (
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodUID,
)
from shared.requests import parse_quantity

#: (node, card index) -> the card as the node registered it (None when not known here).
CardOf = Callable[[NodeName, int], DeviceInfo | None]


def reserved_pods(claim: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(name, uid) of the pods a claim is reserved for."""
    return tuple((str(r.get("name", "")), str(r.get("uid", "")))
                 for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods")


def claim_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's claim names (``spec.resourceClaims[].name``) -> the ResourceClaim each is."""
    out = {str(c.get("name")): str(c["resourceClaimName"])
           for c in (pod.get("spec") or {}).get("resourceClaims") or [] if c.get("resourceClaimName")}
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("resourceClaimName"):
            out[str(status.get("name"))] = str(status["resourceClaimName"])
    return out


def pod_allocation(pod: Mapping[str, Any], claims: Iterable[Mapping[str, Any]], *, card_of: CardOf,
                   driver: str = dra.DRIVER, decided_at: float = 0.0) -> Allocation | None:
    """The pod's cards from its allocated claims (by name), or None when no container has one."""
    by_name = {str((c.get("metadata") or {}).get("name")): c for c in claims}
    names = claim_names(pod)
    spec = pod.get("spec") or {}
    containers = [c for key in ("initContainers", "containers") for c in spec.get(key) or []]
    slots: list[tuple[ContainerDevice, ...]] = []
    node = ""
    for container in containers:
        cards: list[ContainerDevice] = []
        for ref in (container.get("resources") or {}).get("claims") or []:
            claim = by_name.get(names.get(str(ref.get("name")), ""))
            if claim is None:
                continue
            for result in dra.results(claim, driver):
                if ref.get("request") and ref["request"] != result.request:
                    continue
                card = _card(result, card_of)
                if card is not None:
                    node = node or result.pool
                    cards.append(card)
        slots.append(tuple(cards))
    if not node:
        return None
    meta = pod.get("metadata") or {}
    return Allocation(
        pod_uid=PodUID(str(meta.get("uid", ""))), namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")), node=NodeName(node), devices=tuple(slots),
        containers=tuple(str(c.get("name", "")) for c in containers),
        init_count=len(spec.get("initContainers") or []), state=AllocationState.DECIDED,
        decided_at=decided_at)


def _card(result: dra.Result, card_of: CardOf) -> ContainerDevice | None:
    index = dra.device_index(result.device)
    if index is None:
        return None
    known = card_of(NodeName(result.pool), index)
    try:
        memory = parse_quantity(result.memory) // dra.MIB if result.memory is not None else None
        cores = parse_quantity(result.cores) if result.cores is not None else None
    except ValueError:
        return None
    whole = result.memory is None and result.cores is None  # not shared: the whole card
    return ContainerDevice(
        uuid=known.id if known is not None else DeviceUUID(f"{result.pool}/{result.device}"),
        type=known.type if known is not None else "NVIDIA",
        usedmem=memory if memory is not None else (known.devmem if known is not None and whole else 0),
        usedcores=cores if cores is not None else (known.devcore if known is not None and whole else 0),
        idx=index)
