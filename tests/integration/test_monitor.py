"""The monitor against a real nats-server and a real /metrics socket.

Cases: limits come from the ledger (KV rebuild at start, then decided/released events);
usage events carry used vs allowed per container and device; a container pushed over its
limit yields one usage.over_limit per crossing; one process monitors several nodes and routes
each decision to its node; an undecodable ledger entry is counted and skipped, and so is one
whose body names another pod than its key (or an inventory naming another node); a byte count
past 2**63-1 (live slots summing past u64, a slice of 2**45 MiB) costs one container, counted,
while the node's usage is still published; the real /metrics output (HAMi-core files +
simulator) passes promtool; cache dirs of gone pods go.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgpack
import pytest_asyncio
from asyncwait import wait_until
from monitor_builders import GPU0, GPU1, allocation, promtool_check
from prometheus_client.exposition import generate_latest

from services.monitor.app import MonitorApp
from services.monitor.ledger import MIB
from services.monitor.region_writer import (
    Proc,
    RegionDevice,
    RegionImage,
    SlotDevice,
    build_region,
)
from services.monitor.settings import MonitorSettings
from services.monitor.sources.sim import SimSource
from shared.bus import Bus
from shared.codec import to_wire
from shared.events import AllocationDecided, AllocationReleased, Event, Inventory, Usage, UsageOverLimit
from shared.model import Allocation, DeviceInfo, DeviceUUID


def settings(*nodes: str, **overrides: object) -> MonitorSettings:
    values: dict[str, object] = dict(
        nodes=nodes,
        sources=("sim",),
        metrics_bind="127.0.0.1",
        metrics_port=0,
        interval_s=3600.0,
        publish_interval_s=0.0,
        cleanup_interval_s=0.0,
        resync_interval_s=0.0,
    )
    values.update(overrides)
    return MonitorSettings(**values)  # type: ignore[arg-type]


def uid() -> str:
    return str(uuid.uuid4())


async def put_allocation(bus: Bus, a: Allocation) -> None:
    await (await bus.kv("allocations")).put(a.pod_uid, msgpack.packb(to_wire(a)))


class Events:
    def __init__(self) -> None:
        self.items: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.items.append(event)

    def of(self, kind: type[Event]) -> list[Event]:
        return [e for e in self.items if isinstance(e, kind)]


@pytest_asyncio.fixture
async def usage_events(bus: Bus) -> AsyncIterator[Events]:
    got = Events()
    sub = await bus.subscribe("gpubus.usage.>", got)
    yield got
    await sub.stop()


def usage_of(events: Events, node: str) -> list[Usage]:
    return [e for e in events.of(Usage) if isinstance(e, Usage) and e.node == node]


async def test_limits_come_from_the_ledger_rebuilt_at_start_and_kept_by_events(
    bus: Bus, usage_events: Events
) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    early = allocation(uid(), "early", [[(GPU0, 3000, 30)]], node=node)
    await put_allocation(bus, early)
    async with MonitorApp.build(settings(node), bus) as app:
        monitor = app.monitors[node]
        assert early.pod_uid in monitor.ledger and monitor.ledger.synced
        late = allocation(uid(), "late", [[(GPU1, 1000, 10)]], node=node)
        await bus.publish(AllocationDecided(allocation=late, node=node))
        await wait_until(lambda: late.pod_uid in monitor.ledger, what="decision applied")

        await app.collect_once()
        await wait_until(
            lambda: any(len(e.containers) == 2 for e in usage_events.of(Usage)),
            what="usage event with both pods",
        )
        usage = next(e for e in usage_events.of(Usage) if len(e.containers) == 2)
        assert isinstance(usage, Usage) and usage.node == node and usage.source == "test"
        limits = {
            (c.pod, d.uuid): (d.limit_bytes, 0 < d.used_bytes <= d.limit_bytes)
            for c in usage.containers
            for d in c.devices
        }
        assert limits == {("early", GPU0): (3000 * MIB, True), ("late", GPU1): (1000 * MIB, True)}

        await bus.publish(
            AllocationReleased(
                pod_uid=early.pod_uid, namespace="team", name="early", why="deleted", node=node
            )
        )
        await wait_until(lambda: early.pod_uid not in monitor.ledger, what="release applied")
        assert [c.pod for c in app.monitors[node].cycle().containers] == ["late"]


async def test_over_limit_is_published_once_per_crossing(bus: Bus, usage_events: Events) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    hog = allocation(uid(), "hog", [[(GPU0, 2000, 50)]], node=node)
    await put_allocation(bus, hog)
    async with MonitorApp.build(settings(node, sim_overuse=("team/hog",)), bus) as app:
        for _ in range(3):
            await app.collect_once()
        await wait_until(lambda: len(usage_events.of(Usage)) >= 4, what="usage events")
        [over] = usage_events.of(UsageOverLimit)
        assert isinstance(over, UsageOverLimit)
        assert (over.pod, over.container, over.uuid, over.limit_bytes) == ("hog", "main", GPU0, 2000 * MIB)
        assert over.used_bytes > over.limit_bytes
        sim = app.monitors[node].sources[0]
        assert isinstance(sim, SimSource)
        sim.set_overuse([])
        await app.collect_once()
        sim.set_overuse(["hog"])
        await app.collect_once()
        await wait_until(lambda: len(usage_events.of(UsageOverLimit)) == 2, what="second crossing")


async def test_one_process_monitors_several_nodes(bus: Bus) -> None:
    nodes = [f"sim-{i}-{uuid.uuid4().hex[:4]}" for i in range(3)]
    async with MonitorApp.build(settings(*nodes), bus) as app:
        assert app.subjects() == ["gpubus.allocation.>", "gpubus.inventory.>"]
        pods = {
            node: allocation(uid(), f"pod-{i}", [[(GPU0, 100, 10)]], node=node)
            for i, node in enumerate(nodes)
        }
        for node, a in pods.items():
            await bus.publish(AllocationDecided(allocation=a, node=node))
        await wait_until(
            lambda: all(pods[n].pod_uid in app.monitors[n].ledger for n in nodes), what="routing"
        )
        assert all(len(app.monitors[n].ledger) == 1 for n in nodes)
        # A newer decision moves a pod: only the new node holds it; its release empties that node.
        moved = allocation(pods[nodes[0]].pod_uid, "pod-0", [[(GPU1, 100, 10)]], node=nodes[1])
        await bus.publish(AllocationDecided(allocation=moved, node=nodes[1]))
        await wait_until(lambda: len(app.monitors[nodes[1]].ledger) == 2, what="moved decision")
        assert len(app.monitors[nodes[0]].ledger) == 0
        stranger = AllocationReleased(pod_uid=uid(), namespace="team", name="never-decided", why="deleted")
        await bus.publish(stranger)  # a release no monitor holds: nothing changes, nothing fails
        for a in (moved, pods[nodes[2]]):
            released = AllocationReleased(pod_uid=a.pod_uid, namespace="team", name=a.name, why="deleted")
            await bus.publish(released)
        await wait_until(lambda: len(app.monitors[nodes[2]].ledger) == 0, what="released")
        assert [len(app.monitors[n].ledger) for n in nodes] == [0, 1, 0]
        assert pods[nodes[1]].pod_uid in app.monitors[nodes[1]].ledger


async def test_undecodable_ledger_entries_are_counted_and_skipped(bus: Bus) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    good = allocation(uid(), "good", [[(GPU0, 100, 10)]], node=node)
    await put_allocation(bus, good)
    kv = await bus.kv("allocations")
    await kv.put("garbage-1", b"\xc1\xc1 not msgpack")
    await kv.put("garbage-2", msgpack.packb({"pod_uid": 7}))
    async with MonitorApp.build(settings(node), bus) as app:
        assert app.ledger_decode_errors == 2
        assert "gpubus_monitor_ledger_decode_errors_total 2.0" in generate_latest(app.registry).decode()
        assert good.pod_uid in app.monitors[node].ledger


async def test_an_undecodable_event_is_counted_on_metrics(bus: Bus) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    async with MonitorApp.build(settings(node), bus) as app:
        assert "gpubus_bus_decode_errors_total 0.0" in generate_latest(app.registry).decode()
        await bus.js.publish(f"gpubus.allocation.decided.{node}", b"\xc1 not msgpack")
        await wait_until(
            lambda: "gpubus_bus_decode_errors_total 1.0" in generate_latest(app.registry).decode(),
            what="the bad decision counted",
        )


async def test_entries_naming_another_pod_or_node_than_their_key_are_refused(bus: Bus) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    victim = allocation(uid(), "victim", [[(GPU0, 100, 10)]], node=node)
    await put_allocation(bus, victim)
    impostor = dataclasses.replace(victim, name="impostor")
    kv = await bus.kv("allocations")
    await kv.put(f"stray-{uuid.uuid4().hex[:6]}", msgpack.packb(to_wire(impostor)))
    other = Inventory(
        node="another-node", devices=(DeviceInfo(id=DeviceUUID(GPU1), type="NVIDIA-A100", devmem=80_000),)
    )
    await (await bus.kv("inventory")).put(node, msgpack.packb(to_wire(other)))
    async with MonitorApp.build(settings(node), bus) as app:
        ledger = app.monitors[node].ledger
        held = ledger.get(victim.pod_uid)
        assert held is not None and held.name == "victim"
        assert ledger.devices == ()
        assert app.ledger_decode_errors == 2


async def test_an_impossible_byte_count_costs_one_container_not_the_nodes_usage(
    bus: Bus, usage_events: Events, tmp_path: Path
) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    good, summed = (allocation(uid(), name, [[(GPU0, 4000, 10)]], node=node) for name in ("good", "summed"))
    huge = allocation(uid(), "huge", [[(GPU0, 2**45, 10)]], node=node)
    for a in (good, summed, huge):
        await put_allocation(bus, a)
    write_region(tmp_path, good.pod_uid, "main", 100 * MIB, 4000 * MIB, version=1)
    write_region(tmp_path, summed.pod_uid, "main", 2**64 - 1, 4000 * MIB, version=1, procs=2)
    write_region(tmp_path, huge.pod_uid, "main", 200 * MIB, 4000 * MIB, version=1)
    async with MonitorApp.build(settings(node, sources=("hami-core",), hook_path=str(tmp_path)), bus) as app:
        await app.collect_once()
        await wait_until(lambda: bool(usage_of(usage_events, node)), what="a usage sample of the node")
        usage = usage_of(usage_events, node)[0]
        limits = {c.pod: c.devices[0].limit_bytes for c in usage.containers}
        assert limits == {"good": 4000 * MIB, "huge": 4000 * MIB}  # huge: the region's own limit
        text = generate_latest(app.registry).decode()
        cycles = float(app.monitors[node].stats.cycles)
        out_of_range = f'{{node="{node}",reason="out_of_range",source="hami-core"}} {cycles}'
        assert f"gpubus_monitor_decode_errors_total{out_of_range}" in text
        assert f'gpubus_monitor_ledger_bad_limits_total{{node="{node}"}} 1.0' in text


def write_region(
    hook: Path, pod_uid: str, container: str, used: int, limit: int, *, version: int, procs: int = 1
) -> Path:
    d = hook / "containers" / f"{pod_uid}_{container}"
    d.mkdir(parents=True)
    image = RegionImage(
        version=version,
        devices=(RegionDevice(uuid=GPU0, limit_bytes=limit),),
        procs=tuple(
            Proc(pid=p + 1, devices=(SlotDevice(total=used, context=10 * MIB, sm_util=12),))
            for p in range(procs)
        ),
        last_kernel_time=1,
    )
    (d / "0d5c.cache").write_bytes(build_region(image))
    return d


async def test_real_metrics_endpoint_passes_promtool(bus: Bus, tmp_path: Path) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    a = allocation(
        uid(), "trainer", [[(GPU0, 4000, 30)], [(GPU0, 2000, 20)]], containers=("main", "side"), node=node
    )
    await put_allocation(bus, a)
    write_region(tmp_path, a.pod_uid, "main", 1000 * MIB, 4000 * MIB, version=1)
    write_region(tmp_path, a.pod_uid, "side", 500 * MIB, 2000 * MIB, version=0)
    (tmp_path / "containers" / "junk_dir").mkdir()
    (tmp_path / "containers" / "junk_dir" / "x.cache").write_bytes(b"not a region")
    async with MonitorApp.build(
            settings(node, sources=("hami-core", "sim"), hook_path=str(tmp_path), legacy_metrics=False), bus
        ) as app:
        await app.collect_once()
        url = f"http://127.0.0.1:{app.metrics_port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            text = await resp.text()
        labels = f'device_uuid="{GPU0}",namespace="team",pod="trainer",vdevice_index="0",zone="vGPU"'
        assert f'hami_vgpu_memory_used_bytes{{container="main",{labels}}} 1.048576e+09' in text
        assert f'hami_vgpu_memory_limit_bytes{{container="side",{labels}}} 2.097152e+09' in text
        cycles = app.monitors[node].stats.cycles  # the first ran at start
        assert (
            f'gpubus_monitor_decode_errors_total{{node="{node}",reason="bad_magic",source="hami-core"}} '
            f"{float(cycles)}" in text
        )
        assert f'gpubus_monitor_samples_total{{node="{node}",source="hami-core"}} {2.0 * cycles}' in text
        done = promtool_check(text)
        assert done.returncode == 0, done.stdout + done.stderr


async def test_cache_dirs_of_gone_pods_are_removed_after_the_grace(bus: Bus, tmp_path: Path) -> None:
    node = f"node-{uuid.uuid4().hex[:6]}"
    alive = allocation(uid(), "alive", [[(GPU0, 100, 10)]], node=node)
    await put_allocation(bus, alive)
    kept = write_region(tmp_path, alive.pod_uid, "main", 1, 1, version=1)
    gone = write_region(tmp_path, uid(), "main", 1, 1, version=1)
    fresh = write_region(tmp_path, uid(), "main", 1, 1, version=1)
    os.utime(gone, (1, 1))
    os.utime(kept, (1, 1))
    async with MonitorApp.build(
            settings(node, sources=("hami-core",), hook_path=str(tmp_path), cleanup_grace_s=600.0), bus
        ) as app:
        await app.cleanup_once()
        assert (kept.exists(), gone.exists(), fresh.exists()) == (True, False, True)
        assert app.monitors[node].stats.cache_dirs_removed == 1


def test_settings_replace_node_in_the_hook_path() -> None:
    s = dataclasses.replace(settings("a", "b"), hook_path="/var/sim/{node}/vgpu")
    assert [s.hook_path_for(n) for n in s.nodes] == ["/var/sim/a/vgpu", "/var/sim/b/vgpu"]
