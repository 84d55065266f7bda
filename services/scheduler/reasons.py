"""HAMi's Fit rejection reasons and the ``"N/M Reason"`` string they are reported in.

Must not know how the reasons are found (that is fit.py) nor where they are shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class Reason(StrEnum):
    """Why a device (or a node) did not take a container; the values are HAMi's names, spelling included."""

    CARD_NOT_HEALTH = "CardNotHealth"
    CARD_CORDONED = "CardCordoned"
    CARD_TYPE_MISMATCH = "CardTypeMismatch"
    NUMA_NOT_FIT = "NumaNotFit"
    CARD_UUID_MISMATCH = "CardUuidMismatch"
    CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
    RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
    CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
    CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
    CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
    CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
    CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
    NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
    NODE_UNFIT_POD = "NodeUnfitPod"
    NODE_FIT_POD = "NodeFitPod"
    MODE_NOT_FIT = "ModeNotFit"


#: What the extender reports for a node it has no inventory for.
NODE_UNREGISTERED = "node unregistered"


def gen_reason(reasons: Mapping[str, int], total: int) -> str:
    """HAMi ``GenReason``: ``"%d/%d %s"`` per reason, sorted as strings, joined by ``", "``."""
    if set(reasons) == {Reason.NODE_INSUFFICIENT_DEVICE}:
        return Reason.NODE_INSUFFICIENT_DEVICE.value
    return ", ".join(sorted(f"{n}/{total} {r}" for r, n in reasons.items() if n > 0))
