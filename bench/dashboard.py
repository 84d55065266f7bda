"""Dashboard figures at 1000 nodes x 8 cards: start-up fold, page loads, push latency, time travel,
every page navigated to and drawn in Chromium (p99), the 24 h charts drawn, RSS.

The cluster's state is fed to a private nats-server directly (1000 simulated nodes under
``gpubus up`` need more than this machine's 2 cores): 1000 inventories and ~24,000 allocations
in the buckets, and the same as events in the stream (inventory, allocation.decided, one usage
sample per node). ``gpubus dashboard`` runs as its own process. While a background publisher sends
usage samples at the monitors' rate (1000 nodes / 15 s = 67 events/s), it measures: time to
/readyz (seed + fold of the stream's history); page loads (shell + page JSON) per page; the
latency from publishing an ``allocation.decided`` to a live page pushed over server-sent events
showing the pod; a time-travel rebuild from the stream's start; and, where Debian's Chromium and
Playwright are installed, the browser's time from navigation to a drawn page (charts included),
20 times a page, and the charts of the last 24 h drawn from full rings (an in-process dashboard on
the same stream whose rings are filled directly: a bench's stream cannot hold a day of samples).
Prints figures; asserts nothing.

Run: ``.venv/bin/python bench/dashboard.py [NODES] [CARDS] [PODS_PER_CARD] [--smoke]`` (``--smoke``: 10
nodes x 4 cards, no browser, to prove it runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from asyncwait import wait_until  # noqa: E402
from natsproc import NatsServerProcess  # noqa: E402

from gpubus_local.natsserver import free_port  # noqa: E402
from services.dashboard.app import Dashboard  # noqa: E402
from services.dashboard.settings import DashboardSettings  # noqa: E402
from services.dashboard.trends import Scope, Trends, card_samples, node_samples, total  # noqa: E402
from services.dashboard.view import CLUSTER_WIDE, ClusterView  # noqa: E402
from shared.bus import ALLOCATIONS, INVENTORY, Bus, BusSettings  # noqa: E402
from shared.events import (  # noqa: E402
    AllocationDecided,
    ContainerUsage,
    DeviceSample,
    Inventory,
    Usage,
)
from shared.inventory_entries import encode_inventory  # noqa: E402
from shared.ledger_entries import encode_allocation  # noqa: E402
from shared.model import (  # noqa: E402
    Allocation,
    AllocationState,
    ContainerDevice,
    DeviceInfo,
    DeviceUUID,
    NodeName,
    PodUID,
)

CHROMIUM = "/usr/bin/chromium"
MIB = 1 << 20


def node_name(i: int) -> str:
    return f"node-{i:04d}"


def inventory(n: int, cards: int) -> Inventory:
    name = node_name(n)
    return Inventory(node=name, generation=1, devices=tuple(
        DeviceInfo(id=DeviceUUID(f"GPU-{name}-{c}"), index=c, type="NVIDIA-A100-SXM4-80GB", devmem=81920,
                   numa=c // 4, count=10) for c in range(cards)))


def allocation(n: int, card: int, k: int) -> Allocation:
    name = node_name(n)
    return Allocation(pod_uid=PodUID(f"uid-{n}-{card}-{k}"), namespace="bench", name=f"p-{n}-{card}-{k}",
                      node=NodeName(name), containers=("main",), state=AllocationState.APPLIED,
                      devices=((ContainerDevice(uuid=DeviceUUID(f"GPU-{name}-{card}"), usedmem=8000,
                                                usedcores=20, idx=card),),))


def usage(n: int, cards: int, per_card: int) -> Usage:
    return Usage(node=node_name(n), containers=tuple(
        ContainerUsage(namespace="bench", pod=f"p-{n}-{c}-{k}", pod_uid=f"uid-{n}-{c}-{k}", container="main",
                       devices=(DeviceSample(uuid=f"GPU-{node_name(n)}-{c}", used_bytes=(3000 + k) * MIB),))
        for c in range(cards) for k in range(per_card)))


async def feed(bus: Bus, nodes: int, cards: int, per_card: int) -> int:
    inv, alloc = await bus.kv(INVENTORY), await bus.kv(ALLOCATIONS)
    count = 0
    for n in range(nodes):
        snapshot = inventory(n, cards)
        await inv.put(snapshot.node, encode_inventory(snapshot))
        bus.emit(snapshot)
        for c in range(cards):
            for k in range(per_card):
                a = allocation(n, c, k)
                await alloc.put(a.pod_uid, encode_allocation(a))
                bus.emit(AllocationDecided(allocation=a, node=a.node))
                count += 1
        bus.emit(usage(n, cards, per_card))
    await bus.flush(300)
    return count


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1e3:7.1f} ms  p99 {pct(values, 0.99) * 1e3:7.1f} ms"


async def timed(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t)
    return out


async def page_loads(session: aiohttp.ClientSession, base: str, nodes: int) -> None:
    middle = node_name(nodes // 2)
    pages = {"overview": "/", "nodes (50 per page)": "/nodes", "node": f"/nodes/{middle}",
             "card": f"/cards/GPU-{middle}-3", "pods (50 per page)": "/pods",
             "pod": f"/pods/bench/p-{nodes // 2}-3-0", "events": "/events"}
    fresh = iter(range(1_000_000))
    for label, path in pages.items():
        async def load(path: str = path, build: bool = False) -> None:
            # build: a query the page ignores but the cache keys on, so every load builds the page
            extra = f"&bench={next(fresh)}" if build else ""
            for url in (f"{base}{path}", f"{base}/api/page?path={path}{extra}"):
                async with session.get(url) as r:
                    assert r.status == 200, (url, r.status)
                    await r.read()
        async with session.get(f"{base}/api/page?path={path}") as r:
            size = len(await r.read())
        served = await timed(load, 15)
        built = await timed(lambda path=path: load(path, build=True), 15)  # type: ignore[misc]
        print(f"  page load {label:<20} served {ms(served)} | built {ms(built)}  "
              f"({size / 1024:,.0f} KiB JSON)")


async def push_latency(bus: Bus, session: aiohttp.ClientSession, base: str, *, nodes: int, cards: int,
                       rounds: int) -> None:
    n = nodes // 3
    path = f"/nodes/{node_name(n)}"
    latencies: list[float] = []
    async with session.get(f"{base}/api/stream?path={path}") as resp:
        lines = resp.content
        await lines.readline()
        for i in range(rounds):
            name = f"probe-{i}-{uuid.uuid4().hex[:6]}"
            card = DeviceUUID(f"GPU-{node_name(n)}-{i % cards}")
            a = Allocation(pod_uid=PodUID(name), namespace="bench", name=name, node=NodeName(node_name(n)),
                           containers=("main",),
                           devices=((ContainerDevice(uuid=card, usedmem=100, usedcores=1),),))
            await asyncio.sleep(random.uniform(0, 0.5))  # not in step with the pushes
            sent = time.perf_counter()
            await bus.publish(AllocationDecided(allocation=a, node=a.node))
            async with asyncio.timeout(30):
                while True:
                    line = await lines.readline()
                    if line.startswith(b"data: ") and name.encode() in line:
                        latencies.append(time.perf_counter() - sent)
                        break
    print(f"  publish -> live node page pushed with the pod (SSE)  {ms(latencies)}  ({rounds} rounds)")


async def background_usage(bus: Bus, nodes: int, cards: int, per_card: int, stop: asyncio.Event) -> int:
    sent, i = 0, 0
    interval = 15.0 / nodes
    while not stop.is_set():
        bus.emit(usage(i % nodes, cards, per_card))
        sent += 1
        i += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
    return sent


BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def browser_pages(nodes: int) -> dict[str, tuple[str, str]]:
    """label -> (path, what shows the page drawn): charts drawn where the page has them."""
    middle = node_name(nodes // 2)
    charts = "figure.chart[data-chart='cores'].drawn canvas"
    return {"overview (tiles, tables, charts)": ("/", f"main[data-page='overview'] {charts}"),
            "nodes (50 nodes, 400 card bars)": ("/nodes", "main[data-page='nodes'] [data-card]"),
            "node (cards, charts)": (f"/nodes/{middle}", f"main[data-page='node'] {charts}"),
            "card (slices, charts)": (f"/cards/GPU-{middle}-3", f"main[data-page='card'] {charts}"),
            "pods (50 per page)": ("/pods", "main[data-page='pods'] tr[data-pod]"),
            "pod": (f"/pods/bench/p-{nodes // 2}-3-0", "main[data-page='pod'] [data-card]"),
            "events": ("/events", "main[data-page='events']")}


async def browser_loads(base: str, pages: dict[str, tuple[str, str]], runs: int,
                        shot: Path | None = None) -> None:
    """Navigate -> drawn (the page's data fetched over SSE, rendered, its charts drawn), per page."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        print("  browser: Playwright not installed, skipped")
        return
    if not os.access(CHROMIUM, os.X_OK):
        print(f"  browser: no {CHROMIUM}, skipped")
        return
    with tempfile.TemporaryDirectory() as profile:
        async with async_playwright() as pw:
            context = await pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=BROWSER_FLAGS,
                viewport={"width": 1400, "height": 1000})
            page = await context.new_page()
            for label, (path, selector) in pages.items():
                times = []
                for _ in range(runs):
                    t = time.perf_counter()
                    await page.goto(f"{base}{path}")
                    await page.wait_for_selector(selector, timeout=60_000)
                    times.append(time.perf_counter() - t)
                charted = "chart" in selector
                points = await page.get_attribute("figure.chart", "data-points") if charted else None
                extra = f"  ({points} points a series)" if points else ""
                print(f"  browser: navigate -> drawn {label:<34} {ms(times)}  max {max(times) * 1e3:7.1f} ms"
                      f"{extra}")
                if shot is not None:  # the first page, as drawn
                    await page.screenshot(path=str(shot), full_page=True)
                    print(f"  screenshot of {label}: {shot}")
                    shot = None
            await context.close()


def fill_day(trends: Trends, view: ClusterView, now: float) -> None:
    """Every ring full up to ``now`` with the view's present totals (a sine on what is used): what a
    dashboard that has run for a week holds. Written into the rings directly, for the drawing only."""
    for ring in trends.rings.values():
        step, points = ring.tier.step_s, ring.tier.points
        last = math.floor(now / step) - 1
        ring.times = array("d", [(last - k) * step for k in range(points)])
        cards = list(card_samples(view))
        scopes = {Scope.CLUSTER: [(CLUSTER_WIDE, total(r for _, _, r in cards))],
                  Scope.NODE: list(node_samples(view, cards).items()),
                  Scope.CARD: [(uuid, row) for uuid, _, row in cards]}
        for key, row in scopes[ring.tier.scope]:
            wave = array("f")
            for k in range(points):
                used = 0.5 + 0.4 * math.sin(k / 12)
                wave.extend((row[0], row[1], row[1] * used, row[3], row[4], row[4] * used))
            ring.values[key] = wave


async def charts_day(reader: Bus, nodes: int, runs: int, shot: Path | None) -> None:
    """The 24 h charts drawn, on an in-process dashboard whose rings are filled (the stream of a
    bench cannot hold a day of real samples)."""
    dashboard = await Dashboard.start(DashboardSettings(bind="127.0.0.1", port=0), reader)
    try:
        await wait_until(dashboard.ready, 600, what="the in-process dashboard caught up")
        fill_day(dashboard.timeline.trends, dashboard.timeline.view, time.time())
        middle = node_name(nodes // 2)
        charts = "figure.chart[data-chart='cores'].drawn canvas"
        await browser_loads(f"http://127.0.0.1:{dashboard.port}", {
            "overview, last 24 h": ("/?range=day", f"main[data-page='overview'] {charts}"),
            "overview, last hour": ("/?range=hour", f"main[data-page='overview'] {charts}"),
            "node, last 24 h": (f"/nodes/{middle}?range=day", f"main[data-page='node'] {charts}"),
            "card, last hour": (f"/cards/GPU-{middle}-3", f"main[data-page='card'] {charts}")}, runs, shot)
    finally:
        await dashboard.close()


async def full_charts(url: str, nodes: int, shot: Path | None) -> None:
    print("charts over full rings (filled in-process to a week: 24 h = 288 points a series):")
    reader = await Bus.connect(BusSettings(url=url, name="bench-charts"), source="bench")
    try:
        await charts_day(reader, nodes, 10, shot)
    finally:
        await reader.close()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main(nodes: int, cards: int, per_card: int, *, rounds: int = 20, browser: bool = True,
               shot: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServerProcess(Path(tmp) / "nats")
        server.start()
        proc: asyncio.subprocess.Process | None = None
        try:
            bus = await Bus.connect(BusSettings(url=server.url, name="bench", outbox_limit=200_000),
                                    source="bench")
            await bus.ensure_schema()
            t = time.perf_counter()
            pods = await feed(bus, nodes, cards, per_card)
            print(f"fed {nodes} nodes x {cards} cards, {pods:,} pods (buckets + stream) "
                  f"in {time.perf_counter() - t:.1f}s")
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            started = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gpubus", "dashboard", "--bind", "127.0.0.1", "--port", str(port),
                "--nats", server.url, "--log-level", "warning", cwd=ROOT)
            async with aiohttp.ClientSession() as session:
                async with asyncio.timeout(600):
                    while True:
                        with contextlib.suppress(aiohttp.ClientError):
                            async with session.get(f"{base}/readyz") as r:
                                if r.status == 200:
                                    break
                        await asyncio.sleep(0.05)  # a readiness probe's interval
                print(f"dashboard process start -> ready (seed from KV + fold of the stream): "
                      f"{time.perf_counter() - started:.1f}s, RSS {rss_mib(proc.pid):,.0f} MiB")
                stop = asyncio.Event()
                traffic = asyncio.create_task(background_usage(bus, nodes, cards, per_card, stop))
                print(f"with usage samples arriving at {nodes / 15:.0f}/s:")
                await page_loads(session, base, nodes)
                await push_latency(bus, session, base, nodes=nodes, cards=cards, rounds=rounds)
                if browser:
                    await browser_loads(base, browser_pages(nodes), 20)
                stop.set()
                sent = await traffic
                t = time.perf_counter()
                async with session.get(f"{base}/api/page?path=/&at={time.time() - 0.5}") as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                print(f"time travel (a rebuild folding the whole stream, ~{pods + nodes * 2 + sent:,} "
                      f"events): {time.perf_counter() - t:.1f}s")
                print(f"dashboard RSS after the run: {rss_mib(proc.pid):,.0f} MiB")
                if browser:
                    await full_charts(server.url, nodes, shot)
            await bus.close()
        finally:
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await proc.wait()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, help="NODES CARDS PODS_PER_CARD (1000 8 3)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--screenshot", type=Path, help="save the overview's 24 h page, as drawn, here (PNG)")
    args = parser.parse_args()
    sizes = [10, 4, 1] if args.smoke else args.sizes[:3] + [1000, 8, 3][len(args.sizes[:3]):]
    asyncio.run(main(sizes[0], sizes[1], sizes[2], rounds=3 if args.smoke else 20, browser=not args.smoke,
                     shot=args.screenshot))
