"""Every dashboard page in a real browser (Debian's headless Chromium, Playwright) agrees with the
cluster's true state after a scripted run on a whole ``gpubus up``.

The run: a pod placed and Running; a ``generateName`` pod (admitted under its prefix, named by the
API server); a second create of the first pod's name, admitted by the webhook and refused by the
API server (409); a pod too big for any card (Pending); a pod that runs a second and Succeeds.
Cases: the overview counts what the API server holds (no prefix, no refused create among the
pods) and draws its charts, for another range too and as at a moment before the run; the pods
list holds exactly the live GPU pods and its Finished list the finished one; the finished pod's
page shows where it ran and why it ended; the pending pod's page its wait and reasons per node;
the node page its slices (no slice label cut to a letter or two), totals and charts; the card
page its slice and charts; the events page hides heartbeats until asked and filters by pod and
card; no page's script throws. Screenshots go to ``build/artefacts/dashboard/`` (gitignored).
Where Chromium or Playwright cannot be had the module skips, saying which; ``.ci/run`` installs both.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_asyncio
from asyncwait import wait_until
from e2e_harness import E2E, gpu_pod, running_stack

from shared.kube_errors import KubeError

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CHROMIUM = os.environ.get("GPUBUS_CHROMIUM", "/usr/bin/chromium")
ARTEFACTS = Path(__file__).resolve().parents[2] / "build" / "artefacts" / "dashboard"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LIVE_S = 30.0
"""How long a live page may take to show a change (pushes come within a second; CI is slow)."""

playwright_api = pytest.importorskip("playwright.async_api", reason="Playwright (PyPI) is not installed")
if not (Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK)):
    pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium; .ci/run does)",
                allow_module_level=True)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def e2e(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[E2E]:
    async with running_stack(Path(tmp_path_factory.mktemp("stack")), nodes=2,
                             dashboard=("--trend-step", "1", "--idle-after", "1")) as handle:
        yield handle


@pytest_asyncio.fixture(loop_scope="session")
async def page(tmp_path: Path) -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as pw:
        chromium = await pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        try:
            tab = await chromium.new_page()
            tab.on("pageerror", lambda e: errors.append(str(e)))  # an exception in the pages' script
            yield tab
        finally:
            await chromium.close()
        assert not errors, f"the page's script failed: {errors}"


async def shot(page: Any, name: str) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTEFACTS / f"{name}.png"), full_page=True)


async def goto(page: Any, url: str, page_kind: str) -> None:
    response = await page.goto(url)
    assert response is not None and response.status == 200, url
    await page.wait_for_selector(f"main[data-page='{page_kind}']")


async def shows(page: Any, check: Any, what: str) -> None:
    """Wait until the live page satisfies ``check`` (an async predicate on the page)."""
    await wait_until(lambda: check(page), LIVE_S, what=what)


async def texts(page: Any, selector: str, attribute: str) -> set[str]:
    return {cast(str, await el.get_attribute(attribute)) for el in await page.locator(selector).all()}


async def charts_drawn(page: Any) -> None:
    await page.wait_for_selector("figure.chart[data-chart='memory'].drawn canvas")
    await page.wait_for_selector("figure.chart[data-chart='cores'].drawn canvas")
    captions = await page.locator("figure.chart figcaption").all_inner_texts()
    assert [c.split(" (")[0] for c in captions] == ["Memory", "Cores"] and "(GiB)" in captions[0]
    assert "cards' worth of SMs" in captions[1] or "% of the card's SMs" in captions[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Truth:
    """The cluster as the API server tells it after the scripted run."""

    base: str
    before: float
    generated: str
    running: frozenset[str]
    pending: frozenset[str]
    node_a: str
    node_short: str


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def truth(e2e: E2E) -> Truth:
    before = time.time()
    await e2e.create(gpu_pod("truth-a", mem=6000, cores=25))
    template = gpu_pod("unnamed", mem=3000, cores=10)
    template["metadata"].pop("name")
    template["metadata"]["generateName"] = "shared-memory-"
    generated = (await e2e.kube.create_pod("default", cast(Any, template)))["metadata"]["name"]
    assert generated.startswith("shared-memory-") and generated != "shared-memory-"
    with pytest.raises(KubeError, match="already exists"):
        await e2e.create(gpu_pod("truth-a", mem=1000, cores=5))  # admitted, then refused by the API server
    await e2e.create(gpu_pod("truth-big", mem=200_000, cores=10), gpu_pod("truth-short", duration="1s"))
    await e2e.wait_phase(["truth-a", generated], {"Running"})
    await e2e.wait_phase(["truth-short"], {"Succeeded"})
    await e2e.wait_unschedulable("truth-big")
    # the webhook really admitted the prefix and the refused create: the stream holds both
    admitted = [e["name"] for e in await e2e.tap_replay() if e["kind"] == "pod.admitted"]
    assert "shared-memory-" in admitted and admitted.count("truth-a") == 2
    pods = {p["metadata"]["name"]: p for p in (await e2e.kube.list_pods())[0]
            if p["metadata"].get("namespace") == "default"}
    phases = {n: p["status"].get("phase") for n, p in pods.items()}
    assert phases == {"truth-a": "Running", generated: "Running", "truth-big": "Pending",
                      "truth-short": "Succeeded"}
    return Truth(base=f"http://127.0.0.1:{cast(Any, e2e.stack.ports).dashboard}", before=before,
                 generated=generated, running=frozenset({"truth-a", generated}),
                 pending=frozenset({"truth-big"}), node_a=pods["truth-a"]["spec"]["nodeName"],
                 node_short=pods["truth-short"]["spec"]["nodeName"])


async def test_the_overview_counts_what_the_api_server_holds_and_charts_it(truth: Truth, page: Any) -> None:
    await goto(page, f"{truth.base}/", "overview")

    async def counted(p: Any) -> bool:
        got = {k: await p.inner_text(f"[data-count='{k}']") for k in ("Running", "Pending", "Finished")}
        want = {"Running": len(truth.running), "Pending": len(truth.pending), "Finished": 1}
        return got == {k: str(v) for k, v in want.items()}
    await shows(page, counted, "the overview counts 2 running, 1 pending, 1 finished")
    await charts_drawn(page)
    await shows(page, lambda p: _points(p, 2), "the cluster chart has samples")
    assert "A100" in await page.inner_text("[data-type]")
    await shot(page, "overview")
    await goto(page, f"{truth.base}/?range=day", "overview")
    await charts_drawn(page)
    assert await page.get_attribute("[data-range='day']", "class") == "active"


async def test_the_pods_page_lists_the_live_pods_and_the_finished_apart(truth: Truth, page: Any) -> None:
    await goto(page, f"{truth.base}/pods", "pods")
    live = {f"default/{n}" for n in truth.running | truth.pending}

    async def listed(p: Any) -> bool:
        return await texts(p, "tr[data-pod]", "data-pod") == live
    await shows(page, listed, f"the pods page lists {sorted(live)}")
    await shot(page, "pods")
    await goto(page, f"{truth.base}/pods?phase=Finished", "pods")
    assert await texts(page, "tr[data-pod]", "data-pod") == {"default/truth-short"}
    assert (await page.goto(f"{truth.base}/pods/default/shared-memory-")).status == 404


async def test_a_finished_pod_shows_where_it_ran_and_why_it_ended(truth: Truth, page: Any) -> None:
    await goto(page, f"{truth.base}/pods/default/truth-short", "pod")
    assert await page.get_attribute("[data-phase]", "data-phase") == "Finished"
    finished = await page.inner_text("[data-finished]")
    assert truth.node_short in finished and "pod finished" in finished
    await shot(page, "pod-finished")


async def test_a_pending_pod_shows_its_wait_and_reasons_per_node(truth: Truth, e2e: E2E, page: Any) -> None:
    await goto(page, f"{truth.base}/pods/default/truth-big", "pod")
    assert "Pending for" in await page.inner_text("[data-waited]")
    await page.wait_for_selector("table.reasons tr td")
    reasons = await page.locator("table.reasons tr td:first-child").all_inner_texts()
    assert set(reasons) == set(e2e.stack.node_names())
    await shot(page, "pod-pending")


async def test_the_node_and_card_pages_show_the_slice_totals_and_charts(truth: Truth, page: Any) -> None:
    await goto(page, f"{truth.base}/nodes/{truth.node_a}", "node")
    card = page.locator("[data-card]", has=page.locator(".slice[data-pod='default/truth-a']"))
    await card.first.wait_for(timeout=LIVE_S * 1000)
    uuid = cast(str, await card.first.get_attribute("data-card"))
    for label in await page.locator(".slice span").all_inner_texts():
        assert len(label) >= 3, f"a slice label cut to {label!r}"
    assert "cards" in await page.inner_text("[data-totals]")
    await charts_drawn(page)
    await shows(page, lambda p: _points(p, 1), "the node chart has a sample")
    await shot(page, "node")
    await goto(page, f"{truth.base}/cards/{uuid}", "card")
    assert await texts(page, "tr[data-pod]", "data-pod") >= {"default/truth-a"}
    await charts_drawn(page)
    await shot(page, "card")
    await goto(page, f"{truth.base}/events?card={uuid}", "events")
    assert "allocation.decided" in await texts(page, "tr[data-kind]", "data-kind")


async def test_events_hide_heartbeats_until_asked_and_filter_by_pod(truth: Truth, page: Any) -> None:
    await goto(page, f"{truth.base}/events", "events")
    kinds = await texts(page, "tr[data-kind]", "data-kind")
    assert kinds and not kinds & {"inventory.snapshot", "usage.sample"}
    await shot(page, "events")
    await goto(page, f"{truth.base}/events?heartbeats=1", "events")
    assert "inventory.snapshot" in await texts(page, "tr[data-kind]", "data-kind")
    await goto(page, f"{truth.base}/events?pod=default/truth-a", "events")
    lines = await page.locator("tr[data-kind] td:last-child").all_inner_texts()
    assert lines and all("truth-a" in line for line in lines)


async def test_time_travel_shows_the_overview_before_the_run_charts_included(truth: Truth, page: Any) -> None:
    await page.goto(f"{truth.base}/?at={truth.before - 0.5}")
    await page.wait_for_selector("#status.past")
    await page.wait_for_selector("main[data-page='overview']")
    assert await page.inner_text("[data-count='Running']") == "0"
    await charts_drawn(page)
    await shot(page, "overview-as-at-before")


async def _points(page: Any, least: int) -> bool:
    raw = await page.get_attribute("figure.chart[data-chart='memory']", "data-points")
    return raw is not None and int(raw) >= least
