"""What one container's devices must be for a node to allocate them: the single owner of these rules.

The scheduler's Fit builds decisions that meet them (it tries one kind of card per container) and
the node-agent refuses a decision that breaks them before the kubelet ever calls Allocate, so the
two can never disagree: a rule added here binds both sides at once.

A container gets one *kind* of card: MIG instances (cards in ``mig`` mode, isolated in hardware,
seen by their MIG UUIDs) or shared slices (any other mode, limited by HAMi-core). The two cannot be
combined in one container: a MIG container's env lists only MIG UUIDs and loads no limiter, a
shared one's lists whole cards and limits them, and no single env does both.

Pure: no I/O. Must not know the scheduler's scan order or the node-agent's gRPC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

from shared.errors import clip
from shared.model import ContainerDevice, DeviceInfo, DeviceMode, DeviceUUID, PodDevices

#: The refusal of a container given both kinds (the node-agent has always said it in these words).
MIXED_KINDS = "a container mixes MIG instances and shared cards; give it one kind"


class CardKind(StrEnum):
    """How a card serves a container: MIG instances or shared slices."""

    SHARED = "shared"
    MIG = "mig"


def card_kind(card: DeviceInfo) -> CardKind:
    """A card in ``mig`` mode gives MIG instances; every other mode gives shared slices."""
    return CardKind.MIG if card.mode == DeviceMode.MIG else CardKind.SHARED


def device_kind(device: ContainerDevice) -> CardKind:
    """What a decided device is: a MIG instance when it carries one, else a shared slice."""
    return CardKind.SHARED if device.mig is None else CardKind.MIG


def kinds_problem(devices: Iterable[ContainerDevice]) -> str | None:
    """:data:`MIXED_KINDS` when the devices are not all of one kind."""
    return MIXED_KINDS if len({device_kind(d) for d in devices}) > 1 else None


def container_problem(
    container: str, devices: Sequence[ContainerDevice], cards: Mapping[DeviceUUID, DeviceInfo]
) -> str | None:
    """Why this container's devices cannot be allocated on a node advertising ``cards`` (None: they can).

    Each device on an advertised card, at most once (a card in mig mode once per placement), of the
    card's own kind, all of one kind, within the card's registered memory and cores; a MIG instance
    at a profile the card offers, at one of that profile's placements, overlapping no other
    instance of the container.
    """
    # several MIG instances of one card are distinct devices: a card counts once per placement
    if len({(d.uuid, d.mig.placement if d.mig else None) for d in devices}) != len(devices):
        return f"container {container} is given the same GPU twice: {clip(str([d.uuid for d in devices]))}"
    for device in devices:
        problem = _device_problem(container, device, cards.get(device.uuid))
        if problem is not None:
            return problem
    if kinds_problem(devices) is not None:
        return f"container {container}: {MIXED_KINDS}"
    return _overlap([(container, d) for d in devices])


def pod_problem(
    containers: Sequence[str], devices: PodDevices, cards: Mapping[DeviceUUID, DeviceInfo]
) -> str | None:
    """Why a pod's devices (one slot per container, init first) cannot be allocated (None: they can).

    Each container by :func:`container_problem`; and no two MIG instances of the pod overlap, init
    containers' included: the node makes every container's instance when the pod is admitted, and
    they live until the pod goes.
    """
    for name, slot in zip(containers, devices, strict=True):
        problem = container_problem(name, slot, cards)
        if problem is not None:
            return problem
    return _overlap([(name, d) for name, slot in zip(containers, devices, strict=True) for d in slot])


def _overlap(devices: Sequence[tuple[str, ContainerDevice]]) -> str | None:
    placed = [(name, d.uuid, d.mig.placement) for name, d in devices if d.mig is not None]
    for k, (name, uuid, placement) in enumerate(placed):
        for other, other_uuid, other_placement in placed[:k]:
            if other_uuid == uuid and placement.overlaps(other_placement):
                whose = f"container {name} is" if other == name else f"containers {other} and {name} are"
                return f"{whose} given overlapping MIG instances on GPU {uuid}"
    return None


def _device_problem(container: str, device: ContainerDevice, card: DeviceInfo | None) -> str | None:
    if card is None:
        return f"GPU {clip(device.uuid)!r} is not advertised by this node"
    if device_kind(device) is not card_kind(card):
        if device.mig is not None:
            return f"container {container} is given a MIG instance on a card that is not in mig mode"
        return f"container {container} is given a shared slice of GPU {device.uuid}, which is in mig mode"
    if device.usedmem < 0 or not 0 <= device.usedcores <= 100:
        return f"GPU {device.uuid}: memory {device.usedmem} MiB or cores {device.usedcores}% out of range"
    if device.usedmem > card.devmem or device.usedcores > card.devcore:
        return (
            f"GPU {device.uuid}: {device.usedmem} MiB / {device.usedcores}% exceeds"
            f" the card's registered {card.devmem} MiB / {card.devcore}%"
        )
    if device.mig is not None:
        profile = next((p for p in card.mig_profiles if p.name == device.mig.profile), None)
        if profile is None:
            return f"GPU {device.uuid} offers no MIG profile {clip(device.mig.profile)!r}"
        if device.mig.placement not in profile.placements:
            return (
                f"GPU {device.uuid}: MIG profile {profile.name} cannot be placed at slice"
                f" {device.mig.placement.start} (size {device.mig.placement.size})"
            )
    return None
