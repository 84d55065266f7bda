"""The JetStream layout gpubus needs: the ``GPUBUS`` stream and the three KV buckets.

Creation is idempotent and convergent: a missing stream is created, one whose settings
differ is updated, concurrent callers both succeed. Replicas only ever go up here: a stream with
fewer copies than ``BusSettings.replicas`` is raised in place (logged), one with more keeps them
(a service started with the default must not shrink a cluster's R3 stream to R1). Replicas the
cluster cannot place are ``BusRefused`` naming the setting. Knows nothing about event contents
beyond the families in the catalogue.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator

import nats.js.errors
from nats.js import JetStreamContext, api

from shared.bus.buckets import ALLOCATIONS, INVENTORY, LOCKS, STREAM
from shared.bus.settings import REPLICAS_SETTING, BusSettings
from shared.errors import BusRefused
from shared.events import CATALOGUE, SUBJECT_ROOT

log = logging.getLogger(__name__)

#: Request/reply queries live under this token and must stay out of the stream, or JetStream
#: would answer every query with a PubAck before the real responder does.
QUERY_TOKEN = "query"
#: Fields compared to decide whether an existing stream needs an update.
_COMPARED = ("subjects", "max_age", "max_bytes", "max_msgs_per_subject", "duplicate_window",
             "allow_msg_ttl", "allow_direct", "discard", "max_consumers")
#: JetStream API codes of a stream whose replicas the servers cannot place: replicas > 1 on a server
#: without clustering (10074), fewer servers (or none with room) than replicas (10005, 10023).
_UNPLACEABLE = {
    10074: "this NATS server is not part of a JetStream cluster, so it keeps one copy only",
    10005: "the NATS cluster has fewer servers able to hold a copy than that",
    10023: "the NATS cluster lacks the resources (servers, disk) for that many copies",
}


def event_subjects() -> list[str]:
    """One wildcard per event family (``gpubus.allocation.>`` ...), never ``gpubus.query.>``."""
    families = {kind.split(".", 1)[0] for kind in CATALOGUE}
    families.discard(QUERY_TOKEN)
    return [f"{SUBJECT_ROOT}.{family}.>" for family in sorted(families)]


def event_stream_config(settings: BusSettings) -> api.StreamConfig:
    return api.StreamConfig(
        name=STREAM,
        subjects=event_subjects(),
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        discard=api.DiscardPolicy.OLD,
        max_age=settings.stream_max_age_s,
        max_bytes=settings.stream_max_bytes,
        duplicate_window=settings.duplicate_window_s,
        max_consumers=settings.max_consumers,
        num_replicas=settings.replicas,
    )


def bucket_config(bucket: str, *, history: int, ttl: float | None, replicas: int = 1,
                  max_consumers: int = -1) -> api.StreamConfig:
    """The KV stream as nats-py builds it, without ``subject_delete_marker_ttl``: with a limit
    marker, ``create`` keeps failing until the marker itself expires (protocols.md §5)."""
    return api.StreamConfig(
        name=f"KV_{bucket}",
        subjects=[f"$KV.{bucket}.>"],
        allow_direct=True,
        allow_rollup_hdrs=True,
        allow_msg_ttl=True,
        deny_delete=True,
        discard=api.DiscardPolicy.NEW,
        duplicate_window=min(120.0, ttl) if ttl else 120.0,
        max_age=ttl or 0.0,
        max_msgs=-1,
        max_msgs_per_subject=history,
        max_consumers=max_consumers,
        num_replicas=replicas,
        storage=api.StorageType.FILE,
    )


def bucket_configs(settings: BusSettings) -> list[api.StreamConfig]:
    r, c = settings.replicas, settings.max_consumers
    return [
        bucket_config(INVENTORY, history=1, ttl=None, replicas=r, max_consumers=c),
        bucket_config(ALLOCATIONS, history=max(1, min(64, settings.allocations_history)), ttl=None,
                      replicas=r, max_consumers=c),
        bucket_config(LOCKS, history=1, ttl=settings.lock_ttl_s, replicas=r, max_consumers=c),
    ]


async def ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    """Create ``config``'s stream, or update it if its compared settings or too few replicas differ."""
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except nats.js.errors.NotFoundError:
        try:
            with _placed(config):
                await js.add_stream(config)
            log.info("created stream %s with %d replica(s)", config.name, config.num_replicas)
            return
        except nats.js.errors.BadRequestError:
            info = await js.stream_info(config.name)  # a concurrent caller created it first
    have, want = info.config.num_replicas or 1, config.num_replicas or 1
    if have > want:
        log.info("stream %s keeps its %d replicas (the setting asks %d; never lowered here)",
                 config.name, have, want)
        config = dataclasses.replace(config, num_replicas=have)
    if _differs(info.config, config) or have < want:
        with _placed(config):
            await js.update_stream(config)
        if have < want:
            log.warning("stream %s raised from %d to %d replicas", config.name, have, want)
        else:
            log.info("updated stream %s", config.name)


@contextlib.contextmanager
def _placed(config: api.StreamConfig) -> Iterator[None]:
    """A create/update the servers cannot place becomes ``BusRefused`` naming the replicas setting."""
    try:
        yield
    except nats.js.errors.APIError as e:
        why = _UNPLACEABLE.get(e.err_code or 0)
        if why is None or (config.num_replicas or 1) <= 1:
            raise
        raise BusRefused(f"bus setting {REPLICAS_SETTING} is {config.num_replicas} but {why}: stream "
                         f"{config.name} cannot be placed (JetStream error {e.err_code}: {e.description}). "
                         "Lower the setting to the number of JetStream servers, or add servers") from e


def _differs(current: api.StreamConfig, wanted: api.StreamConfig) -> bool:
    return any(_norm(n, getattr(current, n)) != _norm(n, getattr(wanted, n)) for n in _COMPARED)


def _norm(name: str, value: object) -> object:
    """Server replies fill defaults (-1, 0, False) where a request left None; compare like with like."""
    if name == "subjects":
        return sorted(value or [])  # type: ignore[call-overload]
    if isinstance(value, bool) or name.startswith("allow_"):
        return bool(value)
    if isinstance(value, float) or name in ("max_age", "duplicate_window"):
        return round(float(value or 0.0), 3)  # type: ignore[arg-type]
    if hasattr(value, "value"):
        return str(value.value)
    if value is None or (isinstance(value, int) and value <= 0):
        return -1
    return value
