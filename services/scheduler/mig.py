"""HAMi's MIG placement rules: which profile and which placement a card in ``mig`` mode gives a request.

Carried over from HAMi v2.10 ``pkg/device/nvidia/mig_topology.go`` (placement order, overlap) and
``device.go`` ``selectMigCandidate`` (the smallest profile with enough memory that has a free
placement). Must not know Fit's other checks, the ledger or NVML. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.model import MigPlacement, MigProfile


def _prefers_high_start(profile: str) -> bool:
    """1g and 3g instances are packed from the top, leaving the low slices whole for larger profiles."""
    return profile.startswith(("1g.", "3g."))


def ordered_placements(profile: str, placements: Sequence[MigPlacement]) -> list[MigPlacement]:
    """NVML's placements in the order HAMi tries them (stable for equal starts)."""
    return sorted(placements, key=lambda p: p.start, reverse=_prefers_high_start(profile))


def free_placement(profile: MigProfile, occupied: Sequence[MigPlacement]) -> MigPlacement | None:
    """The first placement of ``profile`` that overlaps no occupied one."""
    for candidate in ordered_placements(profile.name, profile.placements):
        if not any(candidate.overlaps(held) for held in occupied):
            return candidate
    return None


def select_candidate(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], memory: int
) -> tuple[MigProfile, MigPlacement] | None:
    """The smallest profile (memory, then slices) with at least ``memory`` MiB and a free placement."""
    for profile in sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)):
        if profile.memory_mb < memory:
            continue
        placement = free_placement(profile, occupied)
        if placement is not None:
            return profile, placement
    return None
