"""The names of gpubus's JetStream stream and KV buckets: declared here and nowhere else.

Every service and tool that opens a bucket imports its name from here (through :mod:`shared.bus`);
:mod:`shared.bus.schema` creates exactly these. Knows nothing about their contents.
"""

from __future__ import annotations

#: The one JetStream stream that carries every event (subjects ``gpubus.>``).
STREAM = "GPUBUS"
#: Node -> its full inventory (:mod:`shared.inventory_entries`).
INVENTORY = "inventory"
#: Pod UID -> its allocation, the ledger (:mod:`shared.ledger_entries`), and the leader's term key.
ALLOCATIONS = "allocations"
#: Leases: the scheduler leader lease (the Allocate ambiguity leases of :mod:`shared.handoff` are gone).
LOCKS = "locks"
#: Every bucket, in the order the schema creates them.
BUCKETS = (INVENTORY, ALLOCATIONS, LOCKS)
