"""HAMi's MIG placement rules: which profile and which placement a card in ``mig`` mode gives a request.

Carried over from HAMi v2.10 ``pkg/device/nvidia/mig_topology.go`` (placement order, overlap) and
``device.go`` ``selectMigCandidate`` (the smallest profile with enough memory that has a free
placement) and ``CustomFilterRule``/``AddResourceUsage`` (what one more instance of a card books),
and which cards a container may combine (one kind: :mod:`shared.allocation_rules`). Must not know
Fit's other checks, the ledger or NVML. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from shared.allocation_rules import CardKind, card_kind
from shared.model import ContainerDevice, DeviceInfo, MigPlacement, MigProfile, MigSlice


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


def pick_instance(
    card: DeviceInfo, held: Sequence[MigPlacement], picks: Sequence[ContainerDevice], took: ContainerDevice
) -> ContainerDevice | None:
    """Fit's check 15 (HAMi ``CustomFilterRule`` + ``AddResourceUsage``): the card's smallest profile
    with the memory and a placement free of the card's instances and this container's earlier picks
    on it; the card then books the profile's memory and cores, not the request's. None: no room."""
    occupied = [*held, *(c.mig.placement for c in picks if c.uuid == card.id and c.mig is not None)]
    choice = select_candidate(card.mig_profiles, occupied, took.usedmem)
    if choice is None:
        return None
    profile, placement = choice
    return replace(
        took,
        usedmem=profile.memory_mb,
        usedcores=profile.core,
        mig=MigSlice(profile=profile.name, placement=placement),
    )


def kind_groups(devices: Sequence[DeviceInfo], scan: Sequence[int]) -> list[list[int]]:
    """``scan`` (device positions, scanned from the end) split by card kind, each group in its
    original order; the kind the scan meets first comes first."""
    groups: dict[CardKind, list[int]] = {}
    for i in reversed(scan):
        groups.setdefault(card_kind(devices[i]), []).append(i)
    return [group[::-1] for group in groups.values()]
