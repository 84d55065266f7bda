"""The bus on a real 3-server JetStream cluster (the one ``gpubus up --nats-cluster 3`` runs).

Case matrix:
- replicas placed: R3 stream and buckets created on 3 servers; R1 assets raised in place to R3
  (logged); a later R1 setting never lowers them.
- replicas refused, at once, naming the setting (even with retries set to forever): R3 on a
  single server (JetStream 10074), R5 on 3 servers (10005); an out-of-range value before connecting.
- a server lost mid-stream: the ``GPUBUS`` stream leader SIGKILLed while events are emitted; every
  event is stored exactly once (publishes retried with the same ``Nats-Msg-Id``) and a KV write
  after the loss succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from asyncwait import wait_until
from bus_settings import bus_settings
from natsproc import NatsServerProcess

from gpubus_local.natscluster import EmbeddedCluster
from shared.bus import ALLOCATIONS, INVENTORY, LOCKS, STREAM, Bus
from shared.bus.kv import _lagging
from shared.errors import BusRefused
from shared.events import Event, PodAdmitted

ASSETS = (STREAM, f"KV_{INVENTORY}", f"KV_{ALLOCATIONS}", f"KV_{LOCKS}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "nats", size=3, port=0) as c:
        yield c


@pytest_asyncio.fixture
async def r3_bus(cluster: EmbeddedCluster) -> AsyncIterator[Bus]:
    b = await Bus.connect(bus_settings(cluster.url, replicas=3, request_timeout_s=1.0), source="test")
    await b.ensure_schema()
    try:
        yield b
    finally:
        await b.close()


async def _replicas(bus: Bus) -> dict[str, int]:
    return {name: (await bus.js.stream_info(name)).config.num_replicas or 1 for name in ASSETS}


async def test_r3_stream_and_buckets_are_placed_on_three_servers(r3_bus: Bus) -> None:
    assert await _replicas(r3_bus) == dict.fromkeys(ASSETS, 3)
    info = await r3_bus.js.stream_info(f"KV_{ALLOCATIONS}")
    assert info.cluster is not None and info.cluster.leader in {"nats-1", "nats-2", "nats-3"}
    assert len(info.cluster.replicas or []) == 2


async def test_r1_assets_are_raised_to_r3_in_place_and_never_lowered(
        cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture) -> None:
    r1 = await Bus.connect(bus_settings(cluster.url), source="old")
    try:
        await r1.ensure_schema()
        await (await r1.kv(ALLOCATIONS)).put("pod-1", b"kept")
        assert await _replicas(r1) == dict.fromkeys(ASSETS, 1)
    finally:
        await r1.close()
    r3 = await Bus.connect(bus_settings(cluster.url, replicas=3), source="new")
    try:
        with caplog.at_level(logging.WARNING, logger="shared.bus.schema"):
            await r3.ensure_schema()
        assert await _replicas(r3) == dict.fromkeys(ASSETS, 3)
        raised = [r.getMessage() for r in caplog.records if "raised from 1 to 3 replicas" in r.getMessage()]
        assert len(raised) == len(ASSETS), raised
        assert (await (await r3.kv(ALLOCATIONS)).get("pod-1")).value == b"kept"  # type: ignore[union-attr]
    finally:
        await r3.close()
    default = await Bus.connect(bus_settings(cluster.url), source="default")
    try:
        await default.ensure_schema()
        assert await _replicas(default) == dict.fromkeys(ASSETS, 3)
    finally:
        await default.close()


async def test_r3_on_a_single_server_is_refused_at_once_naming_the_setting(
        private_nats: NatsServerProcess) -> None:
    # Retries set to forever: only an error that no retry loop swallows can end this test.
    settings = bus_settings(private_nats.url, replicas=3, initial_connect_timeout_s=0.0)
    b = await Bus.connect(settings, source="t")
    try:
        with pytest.raises(BusRefused, match=r"replicas \(GPUBUS_BUS_REPLICAS / --nats-replicas\) is 3") as e:
            await b.ensure_schema()
        assert "not part of a JetStream cluster" in str(e.value)
        assert (await b.js.streams_info()) == []  # nothing half-made
    finally:
        await b.close()


async def test_more_replicas_than_servers_is_refused_naming_the_setting(cluster: EmbeddedCluster) -> None:
    b = await Bus.connect(bus_settings(cluster.url, replicas=5, initial_connect_timeout_s=0.0), source="t")
    try:
        with pytest.raises(BusRefused, match="is 5 but the NATS cluster has fewer servers"):
            await b.ensure_schema()
    finally:
        await b.close()


@pytest.mark.parametrize("replicas", [0, 6, -1])
async def test_replicas_out_of_range_are_refused_before_connecting(replicas: int) -> None:
    with pytest.raises(BusRefused, match=r"replicas .* is not in 1\.\.5"):
        await Bus.connect(bus_settings("nats://127.0.0.1:1", replicas=replicas), source="t")


async def test_events_emitted_while_the_stream_leader_dies_are_stored_exactly_once(
        cluster: EmbeddedCluster, r3_bus: Bus) -> None:
    leader = (await r3_bus.js.stream_info(STREAM)).cluster.leader  # type: ignore[union-attr]
    assert leader is not None
    events = [PodAdmitted(namespace="default", name=f"p{i}", uid=f"uid-{i}") for i in range(300)]
    for event in events[:100]:
        r3_bus.emit(event)
    await asyncio.to_thread(cluster.kill, leader)
    for event in events[100:]:
        r3_bus.emit(event)
    assert await r3_bus.flush(60.0), f"{r3_bus.outbox_size} events never acknowledged"
    info = await r3_bus.js.stream_info(STREAM)
    assert info.state.messages == len(events)  # none lost, none stored twice
    assert info.cluster is not None and info.cluster.leader not in (None, leader)
    await (await r3_bus.kv(ALLOCATIONS)).put("after-the-loss", b"x")
    await asyncio.to_thread(cluster.revive, leader)


async def test_a_subscription_made_while_the_stream_leader_is_lost_waits_out_the_election(
        cluster: EmbeddedCluster, r3_bus: Bus) -> None:
    # The consumer create meets "no responders" or a timeout (1 s here) until a new leader is
    # elected: a tap started just after a NATS server died failed on it before it was retried.
    events = [PodAdmitted(namespace="default", name=f"p{i}", uid=f"uid-{i}") for i in range(20)]
    for event in events:
        r3_bus.emit(event)
    assert await r3_bus.flush(30.0)
    leader = (await r3_bus.js.stream_info(STREAM)).cluster.leader  # type: ignore[union-attr]
    assert leader is not None
    await asyncio.to_thread(cluster.kill, leader)
    seen: list[str] = []

    async def handler(event: Event) -> None:
        if isinstance(event, PodAdmitted):
            seen.append(event.name)
    sub = await r3_bus.subscribe("gpubus.>", handler, deliver="all")
    try:
        await wait_until(lambda: len(seen) == len(events), 60, what="every stored event delivered")
        assert seen == [e.name for e in events]
    finally:
        await sub.stop()
    await asyncio.to_thread(cluster.revive, leader)


async def test_kv_compare_and_set_writes_in_flight_while_the_bucket_leader_dies_all_stand(
        cluster: EmbeddedCluster, r3_bus: Bus) -> None:
    # Each key: a create, then updates against the revision the last write returned. A try that was
    # stored but whose ack was lost must count as done (same Nats-Msg-Id), never as a lost CAS.
    kv = await r3_bus.kv(ALLOCATIONS)
    leader = (await r3_bus.js.stream_info(f"KV_{ALLOCATIONS}")).cluster.leader  # type: ignore[union-attr]
    assert leader is not None
    halfway = asyncio.Event()
    reached: list[str] = []

    async def writer(key: str) -> int:
        revision = await kv.create(key, b"0")
        for i in range(1, 11):
            if i == 5:
                reached.append(key)
                await halfway.wait()
            revision = await kv.update(key, str(i).encode(), revision)
        return revision

    writers = [asyncio.create_task(writer(f"k{n}")) for n in range(30)]
    try:
        await wait_until(lambda: len(reached) == 30 or any(t.done() for t in writers), 30, "writers halfway")
    except AssertionError:
        halfway.set()
        await asyncio.gather(*writers)  # says which writer failed, if one did
        raise
    await asyncio.to_thread(cluster.kill, leader)
    halfway.set()
    revisions = await asyncio.gather(*writers)
    entries = await kv.items()
    assert {k: (e.value, e.revision) for k, e in entries.items()} == {
        f"k{n}": (b"10", revisions[n]) for n in range(30)}
    await asyncio.to_thread(cluster.revive, leader)



async def test_a_snapshot_never_reads_a_replica_that_is_catching_up(
        cluster: EmbeddedCluster, r3_bus: Bus) -> None:
    """A server revived after writes it missed holds an older prefix of the bucket: an R1 read
    consumer placed on it would answer with entries missing (the e2e cluster fault test saw 94 of
    400 revisions). The read is refused there and read again; every read after the revival is whole."""
    kv = await r3_bus.kv(ALLOCATIONS)
    info = await r3_bus.js.stream_info(f"KV_{ALLOCATIONS}")
    assert info.cluster is not None and info.cluster.leader is not None
    follower = next(p.name for p in info.cluster.replicas or [] if p.name)
    await asyncio.gather(*(kv.put(f"before-{n}", b"x") for n in range(20)))
    await asyncio.to_thread(cluster.kill, follower)
    await asyncio.gather(*(kv.put(f"after-{n}", b"y") for n in range(200)))

    # The leader's view of the dead follower: a read placed there is refused, the leader's is not.
    stream = await r3_bus.js.stream_info(f"KV_{ALLOCATIONS}")
    leader = stream.cluster.leader  # type: ignore[union-attr]
    assert leader is not None
    assert _lagging(follower, stream)
    assert _lagging("nats-9", stream)  # not a replica the leader knows of
    assert not _lagging(leader, stream)
    # A replica the leader already calls current may not have applied the tail yet: a read that
    # ends short of what the leader acknowledged before it began is refused while that tail exists.
    floor = stream.state.last_seq
    assert await kv._missed(floor - 200, floor)
    assert await kv._missed(floor - 1, floor)
    assert not await kv._missed(floor, floor)

    await asyncio.to_thread(cluster.revive, follower)
    want = {f"before-{n}" for n in range(20)} | {f"after-{n}" for n in range(200)}
    for _ in range(10):  # placement is the server's choice: read several times while it catches up
        assert set(await kv.keys()) == want
