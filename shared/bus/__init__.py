"""The event bus over NATS JetStream: events, KV state, leases and queries.

``Bus.connect(settings, source=...)`` is the entry point; see :class:`shared.bus.client.Bus`.
Callers see only :mod:`shared.errors` types, never nats-py exceptions.
"""

from shared.bus.buckets import ALLOCATIONS, INVENTORY, LOCKS, STREAM
from shared.bus.client import Bus, QueryHandler, Service
from shared.bus.consumer import ConsumerOptions, DecodeErrorHandler, Deliver, Handler, Subscription
from shared.bus.errors import EventRefused, InvalidKey, NoResponders, QueryFailed
from shared.bus.fanout import ANY, Fanout, Route
from shared.bus.kv import KV, Entry, Snapshot, Watch, WatchCallback
from shared.bus.lease import Lease, OwnerCheck
from shared.bus.schema import QUERY_TOKEN, event_subjects
from shared.bus.settings import BusSettings
from shared.bus.stats import BusStats
from shared.bus.typed_kv import read_typed

__all__ = [
    "ALLOCATIONS",
    "ANY",
    "INVENTORY",
    "KV",
    "LOCKS",
    "QUERY_TOKEN",
    "STREAM",
    "Bus",
    "BusSettings",
    "BusStats",
    "ConsumerOptions",
    "DecodeErrorHandler",
    "Deliver",
    "Entry",
    "EventRefused",
    "Fanout",
    "Handler",
    "InvalidKey",
    "Lease",
    "NoResponders",
    "OwnerCheck",
    "QueryFailed",
    "QueryHandler",
    "Route",
    "Service",
    "Snapshot",
    "Subscription",
    "Watch",
    "WatchCallback",
    "event_subjects",
    "read_typed",
]
