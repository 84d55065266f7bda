"""The dashboard in a real browser (Debian's headless Chromium driven by Playwright) on a whole ``gpubus up``.

Cases: a submitted pod appears, live, as a slice on its card (the page was open before the pod
was created: the change is pushed, not reloaded); a Pending pod's page shows why, per node, with
the same reasons as its ``pod.unschedulable`` event on the stream (what ``gpubus explain`` gives);
an unknown pod in the URL is the 404 page; time travel to before the pod existed shows its card
without it. Screenshots go to ``tests/artefacts/dashboard/`` (gitignored). Where Chromium or
Playwright cannot be had the module skips, saying which; ``.ci/run`` installs both.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod, running_stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CHROMIUM = os.environ.get("GPUBUS_CHROMIUM", "/usr/bin/chromium")
ARTEFACTS = Path(__file__).resolve().parents[1] / "artefacts" / "dashboard"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright (PyPI) is not installed")
if not (Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium; .ci/run does)",
                allow_module_level=True)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def e2e(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[E2E]:
    async with running_stack(Path(tmp_path_factory.mktemp("stack")), nodes=2) as handle:
        yield handle


@pytest_asyncio.fixture(loop_scope="session")
async def browser(tmp_path: Path) -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as pw:
        # a fresh profile (--user-data-dir, which Playwright passes for a persistent context)
        chromium = await pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1280, "height": 900})
        try:
            yield chromium
        finally:
            await chromium.close()


def base(e2e: E2E) -> str:
    assert e2e.stack.ports is not None
    return f"http://127.0.0.1:{e2e.stack.ports.dashboard}"


async def shot(page: Any, name: str) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTEFACTS / f"{name}.png"), full_page=True)


async def test_a_submitted_pod_appears_on_its_card_live(e2e: E2E, browser: Any) -> None:
    pages = {}
    for node in e2e.stack.node_names():  # every node's page is open before the pod exists
        pages[node] = await browser.new_page()
        await pages[node].goto(f"{base(e2e)}/nodes/{node}")
        await pages[node].wait_for_selector(f"section.node[data-node='{node}'] [data-card]")
        await pages[node].wait_for_selector("#status.live")
    before = time.time()
    await e2e.create(gpu_pod("shown", mem=6000, cores=25))
    await e2e.wait_phase(["shown"], {"Running"})
    placed_on = e2e.pods["shown"]["spec"]["nodeName"]
    page = pages[placed_on]  # not reloaded: the slice arrives by server-sent event
    slice_ = page.locator("[data-card] .slice[data-pod='default/shown']")
    await slice_.wait_for(timeout=15_000)
    title = await slice_.get_attribute("title")
    assert title is not None and "6000 MiB" in title and "25% cores" in title
    assert all([await p.locator(".slice[data-pod='default/shown']").count() == 0
                for n, p in pages.items() if n != placed_on])
    await shot(page, "node-with-pod")

    await page.goto(f"{base(e2e)}/")
    await page.wait_for_selector("h1:text('Overview')")
    await shot(page, "overview")

    await page.goto(f"{base(e2e)}/nodes/{placed_on}?at={before - 0.5}")
    await page.wait_for_selector("#status.past")
    await page.wait_for_selector(f"section.node[data-node='{placed_on}'] [data-card]")
    assert await page.locator(".slice[data-pod='default/shown']").count() == 0
    await shot(page, "time-travel-before-the-pod")
    await e2e.kube.delete_pod("default", "shown")


async def test_a_pending_pod_shows_why_per_node(e2e: E2E, browser: Any) -> None:
    await e2e.create(gpu_pod("too-big", mem=200_000, cores=10))
    await e2e.wait_unschedulable("too-big")
    events = await e2e.tap_replay()
    verdicts = [e for e in events if e["kind"] == "pod.unschedulable" and e["name"] == "too-big"]
    assert verdicts, "the scheduler published no pod.unschedulable for too-big"
    page = await browser.new_page()
    await page.goto(f"{base(e2e)}/pods/default/too-big")
    await page.wait_for_selector("table.reasons tr td")

    async def shown() -> dict[str, str]:
        """Node -> reason as the table shows them; a row caught half-drawn (no cell break yet) is
        left out, and the wait below reads the table again."""
        rows = await page.locator("table.reasons tr").all_inner_texts()
        return dict(row.split("\t", 1) for row in rows[1:] if "\t" in row)

    async def matches_newest() -> bool:
        reasons = [e["reasons"] for e in await e2e.tap_replay()
                   if e["kind"] == "pod.unschedulable" and e["name"] == "too-big"]
        return await shown() == reasons[-1]
    await wait_until(matches_newest, 30, what="the page shows the newest verdict's reasons")
    assert set(await shown()) == set(e2e.stack.node_names())
    await shot(page, "pending-pod")
    await e2e.kube.delete_pod("default", "too-big")


async def test_an_unknown_pod_in_the_url_is_a_404_page(e2e: E2E, browser: Any) -> None:
    page = await browser.new_page()
    response = await page.goto(f"{base(e2e)}/pods/default/no-such-pod")
    assert response is not None and response.status == 404
    assert "404 Not found" in await page.inner_text("h1")
    async with aiohttp.ClientSession() as session, session.get(f"{base(e2e)}/metrics") as r:
        assert "gpubus_dashboard_not_found_total" in await r.text()
