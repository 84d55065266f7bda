"""Typed KV buckets: get/put/create/update (CAS)/delete, a bulk snapshot and live watches.

Values are opaque bytes here (callers encode model dataclasses with :mod:`shared.codec`).
This module knows JetStream KV semantics (revisions, tombstones, TTL markers) and must not
know what the keys or values mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KV_DEL, KV_MARKER_REASON, KV_OP, KV_PURGE, KeyValue

from shared.bus import natspy
from shared.bus.acked import publish_acked
from shared.bus.errors import translated
from shared.bus.failover import through_failover
from shared.errors import BusUnavailable, CasConflict, Fenced

log = logging.getLogger(__name__)

#: A snapshot consumer left behind by a dead process is removed after this, seconds.
_SNAPSHOT_INACTIVE_S = 60.0
#: A snapshot read gives up after max(this, keys / _SNAPSHOT_RATE) seconds.
_SNAPSHOT_MIN_S = 30.0
_SNAPSHOT_RATE = 5000.0
#: The idle heartbeat a snapshot read asks for; two missed ones end it.
_SNAPSHOT_HEARTBEAT_S = 1.0
_IDLE_HEARTBEAT = "100"
#: Pause before reading a snapshot again that a leader election cut short, seconds.
_SNAPSHOT_RETRY_S = 0.2

#: The key a fenced write checks instead of its own (nats-server >= 2.11).
_EXPECTED_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"

#: Deleted, purged or expired: the key has no current value.
_TOMBSTONE_OPS = frozenset({KV_DEL, KV_PURGE})


@dataclass(frozen=True, slots=True)
class Entry:
    """The current value of a key and the revision to pass to a CAS update or delete."""

    value: bytes
    revision: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every live key at one moment, and the highest revision seen (tombstones included).

    Watch from ``revision + 1`` to continue from the snapshot without a gap.
    """

    entries: dict[str, Entry]
    revision: int


#: ``callback(key, entry)``; ``entry`` is None when the key was deleted, purged or expired.
WatchCallback = Callable[[str, Entry | None], Awaitable[None]]
#: ``tombstones(key, revision)``: the revision of a delete, purge or expiry marker.
TombstoneCallback = Callable[[str, int], None]


class Watch:
    """A live watch on a bucket; :meth:`stop` ends it. Gapless across server restarts."""

    def __init__(self, sub: JetStreamContext.PushSubscription, owner: KV) -> None:
        self._sub = sub
        self._owner = owner
        self._resuming: asyncio.Task[None] | None = None

    def resume(self) -> None:
        """After a reconnect: re-create the consumer from the last change seen, now."""
        if self._resuming is None or self._resuming.done():
            self._resuming = asyncio.create_task(
                natspy.resume(self._sub, 0, f"kv watch {self._owner.bucket}"),
                name=f"kv-watch-resume-{self._owner.bucket}")

    async def stop(self) -> None:
        self._owner._watches.discard(self)
        if self._resuming is not None:
            self._resuming.cancel()
            await asyncio.gather(self._resuming, return_exceptions=True)
        await natspy.unsubscribe_push(self._sub)


def ttl_header_seconds(ttl: float) -> int:
    """NATS per-message TTLs are whole seconds (minimum 1); round up so a lease never shortens."""
    return max(1, math.ceil(ttl))


def _is_tombstone(msg: Msg) -> bool:
    headers = msg.headers
    if not headers:
        return False
    if headers.get(KV_OP) in _TOMBSTONE_OPS:
        return True
    # Server-written TTL/limit markers (nats-server >= 2.11) also end a key's life.
    return KV_MARKER_REASON in headers


class KV:
    """One KV bucket. Revisions are stream sequence numbers; CAS losers get ``CasConflict``."""

    def __init__(self, nc: Client, js: JetStreamContext, kv: KeyValue, bucket: str, *,
                 timeout: float = 5.0, failover_s: float = 0.0) -> None:
        self._nc = nc
        self._failover_s = failover_s
        self._js = js
        self._timeout = timeout
        self._kv = kv
        self.bucket = bucket
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._watches: set[Watch] = set()

    def resume(self) -> None:
        """After a reconnect: bring every live watch back at once."""
        for watch in list(self._watches):
            watch.resume()

    async def get(self, key: str) -> Entry | None:
        """The current entry, or None when the key is missing, deleted or expired."""
        with translated(f"kv get {self.bucket}/{key}"):
            try:
                e = await self._kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
        if e.value is None:  # an expiry marker read directly
            return None
        return Entry(e.value, e.revision or 0)

    async def put(self, key: str, value: bytes, *, fence: tuple[str, int] | None = None) -> int:
        """Write; returns the new revision.

        ``fence=(other_key, revision)``: stored only while ``other_key`` of this bucket is still at
        ``revision`` (JetStream checks it, in the same step as the store); ``Fenced`` otherwise. A
        message carries one expected-sequence check, so a fenced put checks nothing about ``key``.
        """
        if fence is None:
            return await self._write(key, value, {}, f"kv put {self.bucket}/{key}")
        other, revision = fence
        headers = {api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(revision),
                   _EXPECTED_SUBJECT: self._prefix + other}
        what = f"kv put {self.bucket}/{key} fenced on {other}@{revision}"
        try:
            return await self._write(key, value, headers, what)
        except CasConflict as e:
            raise Fenced(f"{what}: {other} has moved on") from e

    async def create(self, key: str, value: bytes, *, ttl: float | None = None,
                     over: int | None = None) -> int:
        """Write only if the key has no current value (CasConflict otherwise); ``ttl`` is per key.

        ``over``: the revision of the delete marker a watch showed as the key's last change (never
        a live revision: that would make this an update). A create over a marker is then one
        compare-and-set write; without it nats-py's create costs three round trips there (a write
        that fails, a read of the marker, the write again). A stale ``over`` costs one failed write.
        """
        if over:
            with contextlib.suppress(CasConflict):
                return await self.update(key, value, over, ttl=ttl)
        headers = {api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: "0"}
        if ttl is not None:
            headers[api.Header.MSG_TTL.value] = str(ttl_header_seconds(ttl))
        what = f"kv create {self.bucket}/{key}"
        try:
            return await self._write(key, value, headers, what)
        except CasConflict:
            # The key's last message may be a delete marker: then the key has no value, and a
            # create is an update over the marker (as nats-py's own create does).
            marker = await self._tombstone_revision(key, what)
            if marker is None:
                raise
            return await self.update(key, value, marker, ttl=ttl)

    async def update(self, key: str, value: bytes, last: int, *, ttl: float | None = None) -> int:
        """Write only if the current revision is ``last`` (CasConflict otherwise).

        Unlike nats-py's ``update``, a ``ttl`` here is carried on the new revision, so a lease
        renewal keeps its per-key TTL.
        """
        headers: dict[str, str] = {api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(last)}
        if ttl is not None:
            headers[api.Header.MSG_TTL.value] = str(ttl_header_seconds(ttl))
        return await self._write(key, value, headers, f"kv update {self.bucket}/{key}")

    async def delete(self, key: str, *, last: int | None = None) -> int:
        """Delete (tombstone) the key; with ``last`` only if its revision is still ``last``.

        Returns the marker's revision (a later ``create(over=...)`` is then one write).
        """
        headers = {KV_OP: KV_DEL}
        if last:
            headers[api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value] = str(last)
        return await self._write(key, b"", headers, f"kv delete {self.bucket}/{key}")

    async def _write(self, key: str, value: bytes, headers: dict[str, str], what: str) -> int:
        """Publish one revision of ``key``, through a leader election (:mod:`shared.bus.failover`).

        Every try carries the same ``Nats-Msg-Id``: a try stored whose acknowledgement was lost is
        answered as a duplicate on a cluster; where the server checks the expected revision first
        (a single server says "wrong last sequence"), the key's last message is read back and, if
        it carries our id, the write stood.
        """
        msg_id = uuid.uuid4().hex
        headers = {**headers, api.Header.MSG_ID.value: msg_id}
        tries = 0

        async def send() -> int:
            nonlocal tries
            tries += 1
            return await publish_acked(self._nc, self._prefix + key, value, headers=headers,
                                       timeout=self._timeout)

        try:
            with translated(what):
                if not natspy.is_valid_key(key):
                    raise nats.js.errors.InvalidKeyError(key)
                return await through_failover(send, within_s=self._failover_s, what=what)
        except CasConflict:
            if tries > 1 and (stored := await self._last_with_id(key, msg_id, what)) is not None:
                return stored
            raise

    async def _last_message(self, key: str, what: str) -> api.RawStreamMsg | None:
        """From the stream's leader, not a direct get: any replica may answer one, and one still
        catching up would call a write that stood lost (or a delete marker absent)."""
        with translated(what):
            try:
                return await self._js.get_msg(self._stream, subject=self._prefix + key, direct=False)
            except nats.js.errors.NotFoundError:
                return None

    async def _last_with_id(self, key: str, msg_id: str, what: str) -> int | None:
        """The revision of ``key``'s last message if it carries ``msg_id`` (our write stood)."""
        msg = await self._last_message(key, what)
        if msg is None or not msg.headers or msg.headers.get(api.Header.MSG_ID.value) != msg_id:
            return None
        return msg.seq

    async def _tombstone_revision(self, key: str, what: str) -> int | None:
        """The revision of ``key``'s last message if it is a delete or purge marker, else None."""
        msg = await self._last_message(key, what)
        if msg is None or not msg.headers or msg.headers.get(KV_OP) not in _TOMBSTONE_OPS:
            return None
        return msg.seq

    async def purge(self, key: str) -> None:
        """Remove the key and all its history."""
        with translated(f"kv purge {self.bucket}/{key}"):
            await self._kv.purge(key)

    async def items(self) -> dict[str, Entry]:
        """Every live key with its entry (one bulk read, not one request per key)."""
        return (await self.snapshot()).entries

    async def keys(self) -> list[str]:
        return list((await self.snapshot()).entries)

    async def snapshot(self) -> Snapshot:
        """Read the last revision of every key: one pull consumer, drained to its first count.

        The consumer's pending count at creation is exact (nothing is delivered before the first
        pull), so the read ends when that many messages arrived, never on a guess; a read cut
        short by the server or the clock raises ``BusUnavailable`` instead of returning less.
        """
        config = api.ConsumerConfig(
            filter_subject=self._prefix + ">", deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
            ack_policy=api.AckPolicy.NONE, mem_storage=True, num_replicas=1,
            inactive_threshold=_SNAPSHOT_INACTIVE_S,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._failover_s
        what = f"kv snapshot {self.bucket}"
        while True:
            try:
                with translated(what):
                    # Read before the consumer: what the leader had acknowledged then, the read must hold.
                    stream = await through_failover(lambda: self._js.stream_info(self._stream),
                                                    within_s=self._failover_s, what=what)
                    info = await through_failover(lambda: self._js.add_consumer(self._stream, config),
                                                  within_s=self._failover_s, what=what)
                    try:
                        return await self._whole_read(info, stream, what)
                    finally:
                        await self._delete_consumer(info.name)
            except BusUnavailable as e:
                # cut short (a 503 while the stream elects a leader, a lost server): read again
                if loop.time() + _SNAPSHOT_RETRY_S > deadline:
                    raise
                log.info("%s; reading again", e)
                await asyncio.sleep(_SNAPSHOT_RETRY_S)

    async def _whole_read(self, info: api.ConsumerInfo, stream: api.StreamInfo, what: str) -> Snapshot:
        """Drain the read consumer if the server holding it has everything the stream's leader had
        acknowledged before the read began; else ``BusUnavailable`` (the caller reads again).

        On a cluster an R1 consumer may be placed on any replica of the stream, and reads that
        replica's copy. One just restarted holds an older prefix, and the leader says so; but the
        leader calls a replica current once its log holds the writes, before the replica has applied
        them to its copy, so a read placed there can still come back short. So a read that ends
        below the leader's last sequence asks the leader too.
        """
        host = info.cluster.leader if info.cluster is not None else None
        if host is None:  # a single server: its copy is the stream
            return await self._drain(info.name, info.num_pending or 0)
        if not _lagging(host, stream):
            read = await self._drain(info.name, info.num_pending or 0)
            floor = stream.state.last_seq
            if read.revision >= floor or not await self._missed(read.revision, floor):
                return read
        raise BusUnavailable(f"{what}: the server holding the read ({host}) is still catching up "
                             f"with the stream")

    async def _missed(self, highest: int, floor: int) -> bool:
        """Whether the stream's leader holds a message past ``highest`` and at most ``floor``: one a
        read ending at ``highest`` should have reached. One removed since (expired, purged) is not."""
        try:
            msg = await self._js.get_msg(self._stream, seq=highest + 1, subject=self._prefix + ">",
                                         next=True, direct=False)
        except nats.js.errors.NotFoundError:
            return False
        return msg.seq is not None and msg.seq <= floor

    async def _drain(self, consumer: str, expected: int) -> Snapshot:
        entries: dict[str, Entry] = {}
        highest = 0
        if expected == 0:
            return Snapshot(entries, highest)
        seen = 0
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        heard = loop.time()

        async def on_msg(msg: Msg) -> None:
            nonlocal highest, seen, heard
            heard = loop.time()
            if done.done():
                return
            if not msg.reply:  # a status (408 expired, 409 consumer deleted...): cut short
                status = msg.headers.get("Status", "?") if msg.headers else "?"
                if status == _IDLE_HEARTBEAT:
                    return
                done.set_exception(BusUnavailable(f"kv snapshot {self.bucket}: read cut short by "
                                                  f"status {status} after {seen} of {expected}"))
                return
            seen += 1
            seq = msg.metadata.sequence.stream
            highest = max(highest, seq)
            key = msg.subject[len(self._prefix):]
            if _is_tombstone(msg):
                entries.pop(key, None)
            else:
                entries[key] = Entry(msg.data, seq)
            if seen >= expected or msg.metadata.num_pending == 0:
                done.set_result(None)

        timeout = max(_SNAPSHOT_MIN_S, expected / _SNAPSHOT_RATE)
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        try:
            # Idle heartbeats tell a slow read from a dead one: a consumer deleted before the
            # request reached it answers nothing at all, which would otherwise cost the whole timeout.
            request = {"batch": expected, "expires": int(timeout * 1e9),
                       "idle_heartbeat": int(_SNAPSHOT_HEARTBEAT_S * 1e9)}
            next_subject = f"{natspy.api_prefix(self._js)}.CONSUMER.MSG.NEXT.{self._stream}.{consumer}"
            await self._nc.publish(next_subject, json.dumps(request).encode(), reply=inbox)
            deadline = loop.time() + timeout
            while not done.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(done), min(_SNAPSHOT_HEARTBEAT_S, timeout))
                now = loop.time()
                if not done.done() and (now > deadline or now - heard > 2 * _SNAPSHOT_HEARTBEAT_S):
                    why = "timed out" if now > deadline else "the server stopped answering (no heartbeat)"
                    raise BusUnavailable(f"kv snapshot {self.bucket}: {why} after {seen} of {expected}")
            await done
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        return Snapshot(entries, highest)

    async def _delete_consumer(self, consumer: str) -> None:
        """Best effort: the inactivity threshold removes a consumer we could not delete."""
        with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
            await self._js.delete_consumer(self._stream, consumer)

    async def watch(self, callback: WatchCallback, *, start_revision: int | None = None,
                    keys: str = ">", tombstones: TombstoneCallback | None = None) -> Watch:
        """Call ``callback`` for every change from now on (or from ``start_revision``).

        ``tombstones(key, revision)`` first, for a delete marker (see :meth:`create`'s ``over``).
        A callback that raises is logged and skipped; the watch goes on.
        """
        async def on_msg(msg: Msg) -> None:
            key = msg.subject[len(self._prefix):]
            revision = msg.metadata.sequence.stream
            entry = None if _is_tombstone(msg) else Entry(msg.data, revision)
            try:
                if entry is None and tombstones is not None:
                    tombstones(key, revision)
                await callback(key, entry)
            except Exception:
                log.exception("kv watch callback failed for %s/%s", self.bucket, key)

        policy = api.DeliverPolicy.NEW
        if start_revision is not None:
            policy = api.DeliverPolicy.BY_START_SEQUENCE
        with translated(f"kv watch {self.bucket}"):
            # "new" starts after what the bucket holds now; a re-creation must not replay it.
            if start_revision is None:
                floor = (await self._js.stream_info(self._stream)).state.last_seq
            else:
                floor = start_revision - 1
            sub = await self._js.subscribe(
                self._prefix + keys, stream=self._stream, cb=on_msg, ordered_consumer=True,
                deliver_policy=policy,
                config=api.ConsumerConfig(opt_start_seq=start_revision) if start_revision else None,
                inactive_threshold=300.0,
            )
        natspy.prepare(sub, floor)
        watch = Watch(sub, self)
        self._watches.add(watch)
        return watch


def _lagging(host: str, stream: api.StreamInfo) -> bool:
    """Whether ``host`` is a replica of ``stream`` its leader does not call current (or does not know)."""
    cluster = stream.cluster
    if cluster is None or cluster.leader in (None, host):
        return False
    for peer in cluster.replicas or []:
        if peer.name == host:
            return not peer.current or bool(peer.offline)
    return True  # not a replica the leader knows of: do not trust its copy


