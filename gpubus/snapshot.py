"""``gpubus snapshot``: the live cluster as the CLUSTER.json ``gpubus explain`` reads.

Devices come from the ``inventory`` bucket, their usage from the ``allocations`` ledger (failed
entries hold nothing), so ``gpubus explain --cluster <(gpubus snapshot) --pod POD.yaml`` explains a
Pending pod against what the scheduler sees now.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from shared.annotations import collapse_usage, mig_profile_wire
from shared.bus import ALLOCATIONS, INVENTORY, Bus, BusSettings, read_typed
from shared.codec import to_wire
from shared.events import Inventory
from shared.inventory_entries import decode_inventory_entry
from shared.ledger_entries import decode_entry, is_entry_key
from shared.model import Allocation, AllocationState, DeviceUsage, MigPlacement


def cluster_json(inventories: list[Inventory], allocations: list[Allocation]) -> dict[str, Any]:
    """Pure: inventories + ledger -> ``{"nodes": [{"name", "devices": [... used, usedmem, usedcores]}]}``."""
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    held: dict[str, list[MigPlacement]] = defaultdict(list)
    for a in allocations:
        if a.state is AllocationState.FAILED:
            continue
        for uuid, u in collapse_usage(a.devices, a.init_count).items():
            acc = used[uuid]
            acc[0] += u.used
            acc[1] += u.usedmem
            acc[2] += u.usedcores
            held[uuid].extend(u.mig)
    nodes = []
    for inv in sorted(inventories, key=lambda i: i.node):
        devices = []
        for d in inv.devices:
            n, mem, cores = used.get(d.id, [0, 0, 0])
            u = DeviceUsage(used=n, usedmem=mem, usedcores=cores, mig=tuple(held.get(d.id, ())))
            wire = {**to_wire(d), **to_wire(u)}
            del wire["mig_profiles"]  # explain reads them in the register annotation's form
            if d.mig_profiles:
                wire["migProfiles"] = [mig_profile_wire(p) for p in d.mig_profiles]
            if not u.mig:
                del wire["mig"]
            devices.append(wire)
        nodes.append({"name": inv.node, "annotations": {}, "devices": devices})
    return {"nodes": nodes}


async def snapshot(settings: BusSettings) -> dict[str, Any]:
    """The cluster as :func:`cluster_json` draws it; entries that cannot be decoded are logged and
    left out."""
    bus = await Bus.connect(settings, source="snapshot")
    try:
        inventory = await read_typed(await bus.kv(INVENTORY), decode_inventory_entry)
        ledger = await read_typed(await bus.kv(ALLOCATIONS), decode_entry, keep=is_entry_key)
    finally:
        await bus.close()
    return cluster_json(list(inventory.values.values()), list(ledger.values.values()))
