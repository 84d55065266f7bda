"""The NATS permissions of one node's identity: what its node-agent and monitor need, nothing more.

Worked out from what they do on the bus (``services/node_agent``, ``services/monitor``,
``shared/bus``). Publish, the integrity side, is exact: the node's own event subjects and its own
``inventory`` key; nothing in ``locks`` (its Allocate leases went with issue 32's fencing token).
Reading is scoped where the server can see what is read:

- events: consumers on ``GPUBUS`` only with one filter subject of its own node (the create request
  names it: ``$JS.API.CONSUMER.CREATE.GPUBUS.<name>.<filter>``) or ``released._``; no
  multi-filter, legacy or durable create, no consumer listing or info, no pulls from ``GPUBUS``;
- KV: direct gets of its own ``inventory`` key only;
- replies: its own inbox prefix ``_INBOX_<node>`` (:mod:`shared.bus.scope`), never ``_INBOX.>``.

What cannot be scoped by subject: the ``allocations`` ledger is keyed by pod UID, so a node reads
all of it (a consumer on ``KV_allocations`` with its pulls and deletes by consumer name) — it learns
other nodes' decisions from there, but cannot change them. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.bus.buckets import ALLOCATIONS, INVENTORY, STREAM
from shared.bus.scope import node_inbox_prefix
from shared.events import NO_NODE, node_token

API = "$JS.API"


@dataclass(frozen=True, slots=True, kw_only=True)
class Permissions:
    """Allow lists (everything else is denied) and whether replies to requests are allowed."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    responses: int = 0
    """Replies allowed per request received (the node's health query service); 0 none."""


def node_permissions(node: str) -> Permissions:
    """The allow lists of ``node``'s identity (``node`` as Kubernetes names it)."""
    t = node_token(node)
    own_events = (
        f"gpubus.inventory.*.{t}", f"gpubus.device.*.{t}", f"gpubus.usage.*.{t}",
        f"gpubus.allocation.applied.{t}", f"gpubus.allocation.failed.{t}", f"gpubus.allocation.mismatch.{t}",
        # DRA mode: the node-agent unprepares claims (only its own node's subject; the ledger, which
        # places pods, is the scheduler's and does not read released events)
        f"gpubus.allocation.released.{t}",
    )
    kv_writes = (f"$KV.{INVENTORY}.{node}",)
    streams = (STREAM, f"KV_{INVENTORY}", f"KV_{ALLOCATIONS}")  # nothing in locks: not even its info
    info = tuple(f"{API}.STREAM.INFO.{s}" for s in streams)
    reads = (
        f"{API}.CONSUMER.CREATE.{STREAM}.*.gpubus.*.*.{t}",
        f"{API}.CONSUMER.CREATE.{STREAM}.*.gpubus.allocation.released.{NO_NODE}",
        f"{API}.DIRECT.GET.KV_{INVENTORY}.$KV.{INVENTORY}.{node}",
        # the ledger is keyed by pod UID: read whole (module docstring)
        f"{API}.CONSUMER.CREATE.KV_{ALLOCATIONS}",
        f"{API}.CONSUMER.MSG.NEXT.KV_{ALLOCATIONS}.*",
        f"{API}.CONSUMER.DELETE.KV_{ALLOCATIONS}.*",
        f"$JS.FC.{STREAM}.>",  # flow control of its ordered consumers
    )
    return Permissions(
        publish=(*own_events, *kv_writes, *info, *reads),
        subscribe=(f"{node_inbox_prefix(node)}.>", f"gpubus.query.health.{t}"),
        responses=1,
    )
