"""The event bus against a real nats-server.

Cases: publish/subscribe round trip; Nats-Msg-Id dedup; garbage, unknown kind and newer
version are counted and skipped; a failing handler does not stop the loop; deliver="all"
and since-timestamp replay; ensure_schema idempotent and concurrent; KV CAS, tombstones,
snapshot and watch; leases (acquire, re-entrant, renew, release, expiry, takeover);
emit while NATS is down is delivered after it returns; request/reply; settings repr.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import msgpack
import pytest
from asyncwait import wait_until
from bus_settings import bus_settings
from nats.aio.msg import Msg
from natsproc import NatsServerProcess

from shared.bus import ANY, KV, Bus, BusSettings, ConsumerOptions, Entry, NoResponders, QueryFailed, Snapshot
from shared.bus.acked import publish_acked
from shared.bus.errors import translated
from shared.errors import BusUnavailable, CasConflict, EventDecodeError, Fenced, LeaseHeld, LeaseLost
from shared.events import AllocationReleased, DeviceHealth, Event, subject_for


def released(node: str = "node-1", pod: str = "p") -> AllocationReleased:
    return AllocationReleased(pod_uid=uuid.uuid4().hex, namespace="ns", name=pod, why="deleted", node=node)


class Collector:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)

    def ids(self) -> list[str]:
        return [e.id for e in self.events]


async def test_published_event_reaches_subscriber_with_source_stamped(bus: Bus) -> None:
    got = Collector()
    await bus.subscribe("gpubus.allocation.>", got)
    event = released()
    await bus.publish(event)
    await wait_until(lambda: len(got.events) == 1, what="delivery")
    assert got.events[0].id == event.id
    assert got.events[0].source == "test"
    assert bus.published == 1


async def test_same_event_id_published_twice_is_stored_once(bus: Bus) -> None:
    event = released()
    await bus.publish(event)
    await bus.publish(event)
    info = await bus.js.stream_info("GPUBUS")
    assert info.state.messages == 1


async def test_garbage_unknown_kind_and_newer_version_are_counted_and_skipped(bus: Bus) -> None:
    got = Collector()
    bad: list[tuple[str, str]] = []

    async def on_bad(subject: str, data: bytes, error: EventDecodeError) -> None:
        bad.append((subject, str(error)))

    await bus.subscribe("gpubus.>", got, on_decode_error=on_bad)
    await bus.js.publish("gpubus.allocation.released.n1", b"\xc1not msgpack")
    await bus.js.publish("gpubus.allocation.released.n1", msgpack.packb({"kind": "no.such", "v": 1}))
    newer = {"kind": "allocation.released", "v": 99, "pod_uid": "u", "namespace": "n", "name": "p",
             "why": "x"}
    await bus.js.publish("gpubus.allocation.released.n1", msgpack.packb(newer))
    good = released()
    await bus.publish(good)
    await wait_until(lambda: len(got.events) == 1, what="the good event after the bad ones")
    assert got.ids() == [good.id]
    assert bus.decode_errors == 3
    reasons = [r for _, r in bad]
    assert "not valid msgpack" in reasons[0]
    assert "unknown event kind" in reasons[1]
    assert "unsupported major version 99" in reasons[2]


async def test_failing_handler_is_retried_and_does_not_stop_the_loop(bus: Bus) -> None:
    seen: list[str] = []
    poison = released(pod="poison")

    async def handler(event: Event) -> None:
        seen.append(event.id)
        if event.id == poison.id:
            raise RuntimeError("handler bug")

    opts = ConsumerOptions(max_deliver=2, nak_delay_s=0.05)
    await bus.subscribe("gpubus.allocation.>", handler, options=opts)
    await bus.publish(poison)
    after = released(pod="after")
    await bus.publish(after)
    await wait_until(lambda: seen.count(poison.id) == 2 and after.id in seen, what="retry and next event")
    assert bus.stats.handler_errors == 2


async def test_deliver_all_replays_history(bus: Bus) -> None:
    first, second = released(), released()
    await bus.publish(first)
    await bus.publish(second)
    got = Collector()
    await bus.subscribe("gpubus.>", got, deliver="all")
    await wait_until(lambda: len(got.events) == 2, what="replay")
    assert got.ids() == [first.id, second.id]


async def test_deliver_new_skips_history(bus: Bus) -> None:
    await bus.publish(released())
    got = Collector()
    sub = await bus.subscribe("gpubus.>", got, deliver="new")
    fresh = released()
    await bus.publish(fresh)
    await wait_until(lambda: len(got.events) == 1, what="the new event")
    await sub.stop()
    assert got.ids() == [fresh.id]


async def test_deliver_since_timestamp_replays_only_later_events(bus: Bus) -> None:
    await bus.publish(released())
    since = time.time()  # after the first publish was acknowledged, so after its server timestamp
    await wait_until(lambda: time.time() > since, what="the clock to move on")
    later = released()
    await bus.publish(later)
    got = Collector()
    await bus.subscribe("gpubus.>", got, deliver=since)
    await wait_until(lambda: len(got.events) == 1, what="replay since")
    assert got.ids() == [later.id]


async def test_durable_consumer_resumes_where_it_stopped(bus: Bus) -> None:
    got = Collector()
    sub = await bus.subscribe("gpubus.allocation.>", got, durable="resume-test", deliver="all")
    first = released()
    await bus.publish(first)
    await wait_until(lambda: len(got.events) == 1, what="first")
    await sub.stop()
    second = released()
    await bus.publish(second)
    again = Collector()
    sub = await bus.subscribe("gpubus.allocation.>", again, durable="resume-test")
    await wait_until(lambda: len(again.events) == 1, what="second only")
    await sub.stop()
    await bus.js.delete_consumer("GPUBUS", "resume-test")
    assert again.ids() == [second.id]


async def test_ephemeral_consumer_is_deleted_on_stop(bus: Bus) -> None:
    sub = await bus.subscribe("gpubus.>", Collector())
    names = [c.name for c in await bus.js.consumers_info("GPUBUS")]
    assert sub.consumer in names
    await sub.stop()
    names = [c.name for c in await bus.js.consumers_info("GPUBUS")]
    assert sub.consumer not in names


async def test_bad_deliver_value_is_refused(bus: Bus) -> None:
    with pytest.raises(ValueError, match="deliver"):
        await bus.subscribe("gpubus.>", Collector(), deliver="sometimes")


async def test_ensure_schema_is_idempotent_and_concurrent(nats_url: str) -> None:
    buses = [await Bus.connect(bus_settings(nats_url), source=f"s{i}") for i in range(3)]
    try:
        await asyncio.gather(*(b.ensure_schema() for b in buses))
        await buses[0].ensure_schema()
        info = await buses[0].js.stream_info("GPUBUS")
        assert "gpubus.allocation.>" in (info.config.subjects or [])
        locks = await buses[0].js.stream_info("KV_locks")
        assert locks.config.max_msgs_per_subject == 1
        assert not locks.config.subject_delete_marker_ttl
    finally:
        for b in buses:
            await b.close()


async def test_ensure_schema_updates_a_changed_setting(nats_url: str) -> None:
    b = await Bus.connect(bus_settings(nats_url, stream_max_age_s=3600.0), source="t")
    try:
        await b.ensure_schema()
        assert (await b.js.stream_info("GPUBUS")).config.max_age == pytest.approx(3600.0)
    finally:
        await b.close()
    b = await Bus.connect(bus_settings(nats_url), source="t")
    try:
        await b.ensure_schema()
        assert (await b.js.stream_info("GPUBUS")).config.max_age == pytest.approx(24 * 3600.0)
    finally:
        await b.close()


async def test_kv_create_update_delete_with_cas(bus: Bus) -> None:
    kv = await bus.kv("allocations")
    rev = await kv.create("pod-1", b"a")
    with pytest.raises(CasConflict):
        await kv.create("pod-1", b"b")
    rev2 = await kv.update("pod-1", b"b", last=rev)
    with pytest.raises(CasConflict):
        await kv.update("pod-1", b"c", last=rev)
    entry = await kv.get("pod-1")
    assert entry is not None and (entry.value, entry.revision) == (b"b", rev2)
    with pytest.raises(CasConflict):
        await kv.delete("pod-1", last=rev)
    await kv.delete("pod-1", last=rev2)
    assert await kv.get("pod-1") is None
    assert await kv.get("never-written") is None
    await kv.create("pod-1", b"again")  # create works after a delete


async def test_kv_snapshot_skips_deleted_keys_and_watch_continues_from_it(bus: Bus) -> None:
    kv = await bus.kv("inventory")
    await kv.put("n1", b"1")
    await kv.put("n2", b"2")
    await kv.put("n1", b"1b")
    await kv.delete("n2")
    snap = await kv.snapshot()
    assert {k: e.value for k, e in snap.entries.items()} == {"n1": b"1b"}
    changes: list[tuple[str, bytes | None]] = []

    async def on_change(key: str, entry: object) -> None:
        changes.append((key, None if entry is None else entry.value))  # type: ignore[attr-defined]

    watch = await kv.watch(on_change, start_revision=snap.revision + 1)
    await kv.put("n3", b"3")
    await kv.delete("n1")
    await wait_until(lambda: len(changes) == 2, what="two changes")
    await watch.stop()
    assert changes == [("n3", b"3"), ("n1", None)]


async def test_kv_create_over_a_watched_delete_marker_is_one_write(bus: Bus) -> None:
    kv = await bus.kv("locks")
    writes: list[str] = []

    async def on_write(msg: object) -> None:
        writes.append(msg.subject)  # type: ignore[attr-defined]

    sub = await bus.nc.subscribe("$KV.locks.>", cb=on_write)  # every write attempt, won or lost
    markers: list[tuple[str, int]] = []

    async def on_change(key: str, entry: object) -> None:
        pass

    watch = await kv.watch(on_change, tombstones=lambda key, rev: markers.append((key, rev)))
    first = await kv.create("alloc.n1.1", b"a")
    await kv.delete("alloc.n1.1", last=first)
    await wait_until(lambda: len(markers) == 1, what="the delete marker")
    assert markers[0][0] == "alloc.n1.1" and markers[0][1] > first
    await bus.nc.flush()
    before = len(writes)
    second = await kv.create("alloc.n1.1", b"b", over=markers[0][1])
    await bus.nc.flush()
    assert len(writes) - before == 1  # nats-py's create alone: a failing write, a read, a write
    entry = await kv.get("alloc.n1.1")
    assert entry is not None and (entry.value, entry.revision) == (b"b", second)
    with pytest.raises(CasConflict):  # a live key with a stale marker: still a create, and it loses
        await kv.create("alloc.n1.1", b"c", over=markers[0][1])
    await kv.delete("alloc.n1.1", last=second)
    third = await kv.create("alloc.n1.1", b"d", over=markers[0][1])  # a stale marker: plain create
    assert (await kv.get("alloc.n1.1")) == Entry(b"d", third)
    await watch.stop()
    await sub.unsubscribe()


async def test_a_fenced_put_stands_only_while_the_fence_key_is_at_its_revision(bus: Bus) -> None:
    """``Nats-Expected-Last-Subject-Sequence-Subject`` (nats-server >= 2.11): the check is on
    another key of the bucket, in the same step as the store; the written key itself is not checked."""
    kv = await bus.kv("allocations")
    term = await kv.create("term.x", b"one")
    first = await kv.put("p1", b"a", fence=("term.x", term))
    assert await kv.put("p1", b"b", fence=("term.x", term)) > first  # its own key: unconditional
    newer = await kv.update("term.x", b"two", last=term)
    with pytest.raises(Fenced):
        await kv.put("p2", b"late", fence=("term.x", term))
    with pytest.raises(Fenced):  # a key that never existed fences nothing in
        await kv.put("p2", b"late", fence=("term.none", 1))
    assert await kv.get("p2") is None
    assert (await kv.get("p1")) == Entry(b"b", first + 1)
    await kv.put("p2", b"now", fence=("term.x", newer))
    assert (await kv.get("p2")).value == b"now"  # type: ignore[union-attr]


async def test_kv_items_of_empty_bucket_is_empty(bus: Bus) -> None:
    assert await (await bus.kv("allocations")).items() == {}


async def test_lease_acquire_is_exclusive_and_reentrant(bus: Bus) -> None:
    a = await bus.lease("node-a", "owner-1")
    b = await bus.lease("node-a", "owner-2")
    assert await a.acquire()
    assert not await b.acquire()
    with pytest.raises(LeaseHeld):
        await b.acquire_or_raise()
    again = await bus.lease("node-a", "owner-1")
    assert await again.acquire()  # same owner, another handle: re-entrant
    assert await a.holder() == "owner-1"
    assert await again.release()
    assert await b.acquire()
    await b.release()


async def test_lease_renew_and_release(bus: Bus) -> None:
    lease = await bus.lease("node-r", "me", auto_renew=False)
    assert await lease.acquire()
    first = lease.revision
    await lease.renew()
    assert lease.revision is not None and first is not None and lease.revision > first
    assert await lease.release()
    assert await lease.holder() is None
    assert not await lease.release()


async def test_lease_release_at_a_known_revision_is_one_compare_and_delete(bus: Bus) -> None:
    kv = await bus.kv("locks")
    ops: list[str] = []

    async def on_msg(msg: object) -> None:  # one subscription: callbacks in the server's order
        subject = msg.subject  # type: ignore[attr-defined]
        if subject.startswith(("$JS.API.DIRECT.GET.KV_locks.", "$JS.API.STREAM.MSG.GET.KV_locks")):
            ops.append("read")
        elif subject == "$KV.locks.node.k" and (msg.headers or {}).get("KV-Operation"):  # type: ignore[attr-defined]
            ops.append("delete")

    sub = await bus.nc.subscribe(">", cb=on_msg)
    held = await bus.lease("node.k", "a", auto_renew=False)
    assert await held.acquire() and held.revision is not None
    taken_at = held.revision
    assert await held.release()  # held here: at its own revision
    await wait_until(lambda: ops == ["delete"], what="one delete")
    other = await bus.lease("node.k", "a", auto_renew=False)
    assert await held.acquire()  # over the marker: nats-py's create reads it
    await wait_until(lambda: "read" in ops, what="the acquire's read")
    ops.clear()
    assert not await other.release(taken_at)  # told a revision that is gone: nothing deleted, no read
    assert (await kv.get("node.k")) is not None
    assert await other.release(held.revision)  # told the right one
    assert await kv.get("node.k") is None
    await wait_until(lambda: len(ops) >= 4, what="four operations")
    assert ops == ["delete", "read", "delete", "read"]  # the reads are the test's own gets
    await sub.unsubscribe()


async def test_a_lease_given_up_is_lost_here_and_left_in_kv(bus: Bus) -> None:
    lease = await bus.lease("leader.given-up", "a", ttl=30.0, auto_renew=True)
    assert await lease.acquire()
    lease.give_up("a newer term began")
    assert lease.lost.is_set() and not lease.held
    assert await lease.holder() == "a"  # the key is its new holder's or its TTL's to end
    await lease.close()


async def test_lease_expires_after_its_ttl_without_renewal(bus: Bus) -> None:
    held = await bus.lease("node-e", "sleepy", ttl=1, auto_renew=False)
    assert await held.acquire()
    other = await bus.lease("node-e", "next")
    await wait_until(other.acquire, timeout=10, what="expiry lets the next owner in")
    with pytest.raises(LeaseLost):
        await held.renew()
    assert held.lost.is_set()
    await other.release()


async def test_auto_renewed_lease_outlives_its_ttl(bus: Bus) -> None:
    held = await bus.lease("node-k", "keeper", ttl=1)
    assert await held.acquire()
    rev = held.revision
    await wait_until(lambda: held.revision != rev, timeout=5, what="a renewal")
    rivals = await bus.lease("node-k", "rival")
    assert not await rivals.acquire()
    assert held.held
    await held.release()


async def test_dead_owner_is_taken_over_at_once(bus: Bus) -> None:
    dead = await bus.lease("node-t", "pod-dead", auto_renew=False)
    assert await dead.acquire()
    alive: dict[str, bool] = {"pod-dead": False, "pod-live": True}

    async def is_alive(owner: str) -> bool:
        return alive.get(owner, False)

    taker = await bus.lease("node-t", "pod-new", auto_renew=False)
    assert await taker.acquire(is_owner_alive=is_alive)
    assert await taker.holder() == "pod-new"
    blocked = await bus.lease("node-t", "pod-late", auto_renew=False)
    alive["pod-new"] = True
    assert not await blocked.acquire(is_owner_alive=is_alive)
    await taker.release()


async def test_lease_released_from_another_process_by_owner(bus: Bus, nats_url: str) -> None:
    lock = await bus.lease("node-x", "pod-uid-7", auto_renew=False)
    assert await lock.acquire()
    other = await Bus.connect(bus_settings(nats_url), source="node-agent")
    try:
        assert await (await other.lease("node-x", "pod-uid-7")).release()
    finally:
        await other.close()
    assert await lock.holder() is None


async def test_emit_while_nats_is_down_is_delivered_after_restart(private_nats: NatsServerProcess) -> None:
    sender = await Bus.connect(bus_settings(private_nats.url), source="sender")
    try:
        await sender.ensure_schema()
        private_nats.stop()
        await wait_until(lambda: not sender.is_connected, what="disconnect noticed")
        events = [released(node="node-down") for _ in range(3)]
        for e in events:
            sender.emit(e)
        with pytest.raises(BusUnavailable):
            await sender.publish(released())
        private_nats.start()
        assert await sender.flush(within_s=15)
        got = Collector()
        await sender.subscribe("gpubus.allocation.>", got, deliver="all")
        wanted = [e.id for e in events]
        # The publish that timed out may still arrive (it sat in the client's reconnect buffer).
        await wait_until(lambda: set(wanted) <= set(got.ids()), what="replay after restart")
        assert [i for i in got.ids() if i in wanted] == wanted
        assert sender.stats.reconnects >= 1
    finally:
        await sender.close()


async def test_subscriber_keeps_consuming_across_a_server_restart(private_nats: NatsServerProcess) -> None:
    b = await Bus.connect(bus_settings(private_nats.url), source="t")
    try:
        await b.ensure_schema()
        got = Collector()
        await b.subscribe("gpubus.>", got, durable="survivor")
        private_nats.restart()
        event = released()
        b.emit(event)
        await wait_until(lambda: event.id in got.ids(), timeout=20, what="delivery after restart")
    finally:
        await b.close()


@pytest.mark.leaks_tasks("nats-py: closing while reconnecting can leave the request inbox's message task")
async def test_outbox_drops_oldest_when_full(private_nats: NatsServerProcess) -> None:
    b = await Bus.connect(bus_settings(private_nats.url, outbox_limit=2), source="t")
    try:
        await b.ensure_schema()
        private_nats.stop()
        await wait_until(lambda: not b.is_connected, what="disconnect")
        for _ in range(5):
            b.emit(released())
        assert b.dropped >= 3 - 1  # the sender may hold one in flight
        assert b.outbox_size <= 2
    finally:
        private_nats.start()
        await b.close()


async def test_connect_to_nothing_raises_bus_unavailable() -> None:
    from natsproc import free_port

    settings = bus_settings(f"nats://127.0.0.1:{free_port()}", initial_connect_timeout_s=0.5)
    with pytest.raises(BusUnavailable):
        await Bus.connect(settings, source="t")


async def test_request_reply_and_no_responder(bus: Bus) -> None:
    async def echo(payload: bytes) -> bytes:
        return b"re:" + payload

    service = await bus.serve("gpubus.query.node.n1", echo)
    assert await bus.request("gpubus.query.node.n1", b"hi") == b"re:hi"
    await service.stop()
    with pytest.raises(NoResponders, match="no responder is subscribed"):
        await bus.request("gpubus.query.node.nobody", b"hi", timeout=0.5)


async def test_a_failing_handler_answers_with_an_error_reply(bus: Bus) -> None:
    async def broken(payload: bytes) -> bytes:
        raise ValueError("no such node\r\nInjected: header")

    service = await bus.serve("gpubus.query.node.broken", broken)
    before = bus.stats.handler_errors
    try:
        with pytest.raises(QueryFailed, match=r"gpubus.query.node.broken: the responder failed \(500\): "
                                              r"ValueError: no such node Injected: header"):
            await bus.request("gpubus.query.node.broken", b"hi", timeout=5)
    finally:
        await service.stop()
    assert bus.stats.handler_errors == before + 1


async def test_an_error_reply_is_one_bounded_header_line_whatever_the_exception_says(bus: Bus) -> None:
    """Unicode line breaks (which nats-py does not rewrite) and long texts are folded and clipped."""
    async def broken(payload: bytes) -> bytes:
        raise ValueError("ünïcode\u2028Injected: x\x85" + "y" * 300)

    service = await bus.serve("gpubus.query.node.verbose", broken)
    try:
        with pytest.raises(QueryFailed) as raised:
            await bus.request("gpubus.query.node.verbose", b"hi", timeout=5)
    finally:
        await service.stop()
    text = str(raised.value)
    assert "ValueError: ünïcode Injected: x yyy" in text and text.endswith(" chars)")
    assert "\u2028" not in text and "\x85" not in text and len(text) < 300


async def test_a_failing_handler_of_a_plain_publish_is_counted_and_the_service_answers_on(bus: Bus) -> None:
    async def picky(payload: bytes) -> bytes:
        if payload == b"bad":
            raise ValueError("bad payload")
        return b"ok"

    service = await bus.serve("gpubus.query.node.picky", picky)
    before = bus.stats.handler_errors
    try:
        await bus.nc.publish("gpubus.query.node.picky", b"bad")  # no reply subject: nothing to answer
        await wait_until(lambda: bus.stats.handler_errors == before + 1, what="the failure counted")
        assert await bus.request("gpubus.query.node.picky", b"good", timeout=5) == b"ok"
    finally:
        await service.stop()


@pytest.mark.parametrize(("headers", "code"), [
    ({"Nats-Service-Error": "no such node", "Nats-Service-Error-Code": "404"}, "404"),
    ({"Nats-Service-Error": "no such node"}, "500"),
])
async def test_an_error_reply_from_any_nats_micro_responder_is_a_query_failed(
    bus: Bus, headers: dict[str, str], code: str
) -> None:
    async def respond(msg: Any) -> None:
        await bus.nc.publish(msg.reply, b"", headers=headers)

    sub = await bus.nc.subscribe("gpubus.query.node.micro", cb=respond)
    try:
        with pytest.raises(QueryFailed, match=rf"the responder failed \({code}\): no such node"):
            await bus.request("gpubus.query.node.micro", b"hi", timeout=5)
    finally:
        await sub.unsubscribe()


def test_settings_repr_hides_secrets() -> None:
    s = BusSettings(url="nats://u:pw-url@h:4222", password="pw-field", token="tok-secret", user="u")
    text = repr(s)
    assert "pw-url" not in text and "pw-field" not in text and "tok-secret" not in text
    assert "user='u'" in text


def test_subject_for_device_event_ends_with_node() -> None:
    assert subject_for(DeviceHealth(uuid="GPU-1", healthy=False, node="n.7")) == "gpubus.device.health.n_7"


async def test_emitted_events_arrive_in_emit_order(bus: Bus) -> None:
    events = [released(pod=f"p{i}") for i in range(300)]
    for e in events:
        bus.emit(e)
    assert await bus.flush(within_s=20)
    got = Collector()
    await bus.subscribe("gpubus.allocation.>", got, deliver="all")
    await wait_until(lambda: len(got.events) == 300, what="all emitted events")
    assert got.ids() == [e.id for e in events]


# -- routes: many handlers on one ordered push consumer --------------------------------------------
DECISIONS = ("gpubus.allocation.decided.*", "gpubus.allocation.released.*")


async def test_routes_share_one_consumer_and_each_gets_only_its_nodes_events(bus: Bus) -> None:
    a, b = Collector(), Collector()
    consumers_before = (await bus.js.stream_info("GPUBUS")).state.consumer_count
    await bus.route(DECISIONS, "node-a", a)
    await bus.route(DECISIONS, "node-b", b)
    assert (await bus.js.stream_info("GPUBUS")).state.consumer_count == consumers_before + 1
    for_a = [released(node="node-a", pod=f"a{i}") for i in range(3)]
    for_b = released(node="node-b")
    await bus.publish(for_a[0])
    await bus.publish(released(node="node-c"))  # nobody routes node-c
    # not a decision:
    await bus.publish(DeviceHealth(node="node-a", uuid="GPU-1", healthy=False, reason="xid"))
    await bus.publish(for_b)
    for e in for_a[1:]:
        await bus.publish(e)
    await wait_until(lambda: len(a.events) == 3 and len(b.events) == 1, what="routed delivery")
    assert a.ids() == [e.id for e in for_a]
    assert b.ids() == [for_b.id]


async def test_route_starts_at_new_events_and_a_token_routes_once(bus: Bus) -> None:
    old = released(node="node-n")
    await bus.publish(old)
    got = Collector()
    route = await bus.route(DECISIONS, "node-n", got)
    with pytest.raises(ValueError, match="already has a route"):
        await bus.route(DECISIONS, "node-n", Collector())
    new = released(node="node-n")
    await bus.publish(new)
    await wait_until(lambda: len(got.events) == 1, what="the new event")
    assert got.ids() == [new.id]
    await route.stop()
    assert not route.running
    again = Collector()
    await bus.route(DECISIONS, "node-n", again)  # a restarted agent routes its token again
    last = released(node="node-n")
    await bus.publish(last)
    await wait_until(lambda: again.ids() == [last.id], what="delivery to the new route")
    assert got.ids() == [new.id]


async def test_route_counts_undecodable_and_survives_a_failing_handler(bus: Bus) -> None:
    seen: list[str] = []
    poison = released(node="node-p", pod="poison")

    async def handler(event: Event) -> None:
        seen.append(event.id)
        if event.id == poison.id:
            raise RuntimeError("handler bug")

    await bus.route(DECISIONS, "node-p", handler)
    await bus.js.publish("gpubus.allocation.released.node-p", b"\xc1not msgpack")
    await bus.publish(poison)
    after = released(node="node-p", pod="after")
    await bus.publish(after)
    await wait_until(lambda: after.id in seen, what="the event after the bad ones")
    assert seen == [poison.id, after.id]  # no redelivery on a route
    assert bus.decode_errors == 1
    assert bus.stats.handler_errors == 1


async def test_route_gets_events_published_while_its_server_restarted(
        private_nats: NatsServerProcess) -> None:
    listener = await Bus.connect(bus_settings(private_nats.url), source="agent")
    try:
        await listener.ensure_schema()
        got = Collector()
        await listener.route(DECISIONS, "node-r", got)
        before = released(node="node-r", pod="before")
        await listener.publish(before)
        await wait_until(lambda: got.ids() == [before.id], what="delivery before the restart")
        private_nats.stop()
        await wait_until(lambda: not listener.is_connected, what="disconnect noticed")
        private_nats.start()
        publisher = await Bus.connect(bus_settings(private_nats.url), source="scheduler")
        try:
            during = [released(node="node-r", pod=f"d{i}") for i in range(3)]
            for e in during:  # possibly before the listener is back: its consumer must catch up
                await publisher.publish(e)
        finally:
            await publisher.close()
        await wait_until(lambda: len(got.events) == 4, timeout=20, what="events published around the restart")
        assert got.ids() == [before.id, *(e.id for e in during)]
    finally:
        await listener.close()


async def test_trickling_events_cost_an_ack_each_and_few_pull_requests(nats_url: str, bus: Bus) -> None:
    consumer = await Bus.connect(bus_settings(nats_url), source="consumer")
    try:
        got = Collector()
        await consumer.subscribe("gpubus.allocation.>", got)
        sent_before = consumer.nc.stats["out_msgs"]
        for i in range(20):  # one at a time: each arrives alone, the worst case for batching
            await bus.publish(released(pod=f"t{i}"))
            await wait_until(lambda i=i: len(got.events) == i + 1, what=f"event {i}")
        sent = consumer.nc.stats["out_msgs"] - sent_before
        assert sent <= 20 + 3  # 20 acks; one standing request of 64 covers them all
    finally:
        await consumer.close()


async def test_catch_all_route_takes_unrouted_tokens_and_replays_since_a_time(bus: Bus) -> None:
    old = released(node="node-x", pod="old")
    await bus.publish(old)
    since = time.time()
    recent = released(node="node-y", pod="recent")
    await bus.publish(recent)
    mine, rest = Collector(), Collector()
    subjects = ("gpubus.allocation.>", "gpubus.inventory.>")
    await bus.route(subjects, ANY, rest, deliver=since)
    await bus.route(subjects, "node-m", mine)
    live = [released(node="node-m"), released(node="node-z")]
    for e in live:
        await bus.publish(e)
    await wait_until(lambda: len(rest.events) == 2 and len(mine.events) == 1, what="routed and catch-all")
    assert rest.ids() == [recent.id, live[1].id]
    assert mine.ids() == [live[0].id]


async def test_since_time_route_keeps_delivering_after_its_server_restarted(
        private_nats: NatsServerProcess) -> None:
    # A consumer created "by start time" must be re-created by start sequence (JetStream error
    # 10094 refuses both at once), or the route goes silent after the restart.
    listener = await Bus.connect(bus_settings(private_nats.url), source="agent")
    try:
        await listener.ensure_schema()
        got = Collector()
        await listener.route(DECISIONS, ANY, got, deliver=time.time() - 60)
        first = released(node="node-s", pod="first")
        await listener.publish(first)
        await wait_until(lambda: got.ids() == [first.id], what="delivery before the restart")
        private_nats.restart()
        await wait_until(lambda: listener.is_connected, timeout=20, what="reconnect")
        after = released(node="node-s", pod="after")
        listener.emit(after)  # the outbox retries while JetStream recovers
        await wait_until(lambda: len(got.events) == 2, timeout=20, what="delivery after the restart")
        assert got.ids() == [first.id, after.id]
    finally:
        await listener.close()


async def test_kv_watch_resumes_after_a_server_restart_without_replaying(
        private_nats: NatsServerProcess) -> None:
    client = await Bus.connect(bus_settings(private_nats.url), source="watcher")
    try:
        await client.ensure_schema()
        kv = await client.kv("inventory")
        await kv.put("old", b"0")
        changes: list[tuple[str, bytes | None]] = []

        async def on_change(key: str, entry: object) -> None:
            changes.append((key, None if entry is None else entry.value))  # type: ignore[attr-defined]

        watch = await kv.watch(on_change)
        private_nats.restart()
        await wait_until(lambda: client.is_connected, timeout=20, what="reconnect")
        async def put_new() -> bool:
            try:
                await kv.put("new", b"1")
                return True
            except BusUnavailable:
                return False  # JetStream still recovering its streams
        await wait_until(put_new, timeout=20, what="a write after the restart")
        await wait_until(lambda: len(changes) >= 1, timeout=20, what="a change after the restart")
        await kv.delete("new")
        await wait_until(lambda: len(changes) >= 2, timeout=20, what="the delete")
        await watch.stop()
        assert changes == [("new", b"1"), ("new", None)]  # nothing from before the watch
    finally:
        await client.close()


async def test_kv_snapshot_is_exact_every_time_and_survives_a_restart(
        private_nats: NatsServerProcess) -> None:
    client = await Bus.connect(bus_settings(private_nats.url), source="reader")
    try:
        await client.ensure_schema()
        kv = await client.kv("locks")
        keys = {f"alloc.node-{i}.1": f"owner-{i}".encode() for i in range(7)}
        for key, value in keys.items():
            await kv.put(key, value)
        await kv.put("alloc.node-gone.1", b"x")
        await kv.delete("alloc.node-gone.1")
        for _ in range(50):
            assert {k: e.value for k, e in (await kv.items()).items()} == keys
        private_nats.restart()
        await wait_until(lambda: client.is_connected, timeout=20, what="reconnect")

        async def readable() -> bool:
            try:
                return {k: e.value for k, e in (await kv.items()).items()} == keys
            except BusUnavailable:
                return False  # JetStream still recovering its streams
        await wait_until(readable, timeout=20, what="a snapshot after the restart")
        for _ in range(20):
            assert {k: e.value for k, e in (await kv.items()).items()} == keys
        info = await client.js.stream_info("KV_locks")
        assert info.state.consumer_count == 0  # every snapshot deletes its consumer
    finally:
        await client.close()


async def test_publish_in_order_is_stored_after_everything_emitted_before_it(bus: Bus) -> None:
    emitted = [released(node="node-o", pod=f"e{i}") for i in range(40)]
    for e in emitted:
        bus.emit(e)
    last = released(node="node-o", pod="ordered")
    await bus.publish_in_order(last)
    got = Collector()
    await bus.route(DECISIONS, "node-o", got, deliver="all")
    await wait_until(lambda: len(got.events) == 41, what="all 41 events")
    assert got.ids() == [*(e.id for e in emitted), last.id]


async def test_publish_in_order_while_nats_is_down_raises_but_is_sent_later(
        private_nats: NatsServerProcess) -> None:
    sender = await Bus.connect(bus_settings(private_nats.url), source="sender")
    try:
        await sender.ensure_schema()
        private_nats.stop()
        await wait_until(lambda: not sender.is_connected, what="disconnect noticed")
        before, decided = released(node="node-q", pod="before"), released(node="node-q", pod="decided")
        sender.emit(before)
        with pytest.raises(BusUnavailable, match="not acknowledged"):
            await sender.publish_in_order(decided, within_s=0.5)
        private_nats.start()
        assert await sender.flush(within_s=15)
        got = Collector()
        await sender.route(DECISIONS, "node-q", got, deliver="all")
        await wait_until(lambda: len(got.events) == 2, timeout=20, what="both after the restart")
        assert got.ids() == [before.id, decided.id]
    finally:
        await sender.close()


async def test_a_snapshot_whose_reader_is_deleted_fails_instead_of_returning_less(
        bus: Bus, nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read consumer is deleted under the read, at a fixed point (between its creation and the
    pull) rather than by a racing poller, which lost the race on a quick machine."""
    kv = await bus.kv("inventory")
    total = 2000
    await asyncio.gather(*(kv.put(f"n{i}", b"x" * 64) for i in range(total)))

    def delete_the_reader(reader: KV, times: int) -> list[str]:
        deleted: list[str] = []
        drain = reader._drain

        async def drain_a_deleted_consumer(consumer: str, expected: int) -> Snapshot:
            if len(deleted) < times:
                await bus.js.delete_consumer("KV_inventory", consumer)
                deleted.append(consumer)
            return await drain(consumer, expected)
        monkeypatch.setattr(reader, "_drain", drain_a_deleted_consumer)
        return deleted

    # Within failover_s a cut-short read is read again (a leader election does the same to it).
    deleted = delete_the_reader(kv, times=1)
    assert len((await kv.snapshot()).entries) == total
    assert len(deleted) == 1
    # Without: the pull reaches no consumer, the server answers it "no responders" (503), and the
    # read fails at once naming it, never returning less.
    no_retry = await Bus.connect(bus_settings(nats_url, failover_s=0.0), source="no-retry")
    try:
        reader = await no_retry.kv("inventory")
        deleted = delete_the_reader(reader, times=1)
        refused = r"^kv snapshot inventory: read cut short by status 503 after 0 of 2000$"
        with pytest.raises(BusUnavailable, match=refused):
            await reader.snapshot()
        assert len(deleted) == 1
        assert len((await reader.snapshot()).entries) == total
    finally:
        await no_retry.close()


async def test_a_snapshot_read_that_nothing_answers_ends_after_two_missed_heartbeats(bus: Bus) -> None:
    """A pull that reached something but is never served (a consumer dropped after accepting it)
    gets no status at all: the read asked for idle heartbeats and ends after two missed ones, not
    its 30 s budget. Here a plain subscriber takes the pull and answers nothing."""
    kv = await bus.kv("inventory")
    swallowed: list[bytes] = []

    async def swallow(msg: Msg) -> None:
        swallowed.append(msg.data)
    sink = await bus.nc.subscribe("$JS.API.CONSUMER.MSG.NEXT.KV_inventory.ghost", cb=swallow)
    try:
        with pytest.raises(BusUnavailable, match=r"^kv snapshot inventory: the server stopped answering "
                                                 r"\(no heartbeat\) after 0 of 10$"):
            await kv._drain("ghost", 10)
    finally:
        await sink.unsubscribe()
    assert len(swallowed) == 1 and b'"idle_heartbeat"' in swallowed[0]


@pytest.mark.parametrize(("answer", "why"), [
    (b"not json", "malformed publish ack"),
    (b'{"stream": "GPUBUS"}', "malformed publish ack"),
    (b'{"error": {"code": 503, "err_code": 10008, "description": "jetstream temporarily unavailable"}}',
     "jetstream temporarily unavailable"),
])
async def test_an_answer_that_is_no_publish_ack_is_bus_unavailable(bus: Bus, answer: bytes, why: str) -> None:
    """Publish acks are read by shared.bus.acked, not nats-py: an answer that is no ack, or an
    error, is BusUnavailable naming it (as the bus's writes translate it), never a sequence."""
    subject = f"gpubus.query.ack-{uuid.uuid4().hex[:8]}"  # no stream holds it: only the impostor answers

    async def impostor(_: bytes) -> bytes:
        return answer

    service = await bus.serve(subject, impostor)
    try:
        await bus.nc.flush()
        with pytest.raises(BusUnavailable, match=why), translated("write"):
            await publish_acked(bus.nc, subject, b"v", headers=None, timeout=2.0)
    finally:
        await service.stop()


async def test_a_publish_ack_gives_the_stream_sequence(bus: Bus) -> None:
    kv = await bus.kv("locks")
    key = f"ack-{uuid.uuid4().hex[:8]}"
    first = await kv.put(key, b"1")
    second = await kv.put(key, b"2")
    assert second > first > 0
    assert await kv.get(key) == Entry(b"2", second)
    assert await kv.delete(key, last=second) > second
