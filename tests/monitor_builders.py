"""Builders shared by the monitor tests (no tests here): device UUIDs and pod UIDs, ledger
allocations, a scripted usage source with a monitor over it, and promtool's metrics lint.

Must not know any one test's expectations; the unit and integration monitor tests import from here.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from services.monitor.ledger import Ledger
from services.monitor.monitor import Monitor, MonitorOptions
from services.monitor.readings import SourceReading
from shared.events import Event
from shared.model import Allocation, AllocationState, ContainerDevice, DeviceUUID, NodeName, PodUID

REPO = Path(__file__).resolve().parents[1]

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
UID_A = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
UID_B = "1f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"


def allocation(
    uid: str,
    name: str,
    slots: Sequence[Sequence[tuple[str, int, int]]],
    *,
    containers: Sequence[str] = ("main",),
    node: str = "n1",
    state: AllocationState = AllocationState.APPLIED,
) -> Allocation:
    return Allocation(
        pod_uid=PodUID(uid),
        namespace="team",
        name=name,
        node=NodeName(node),
        state=state,
        containers=tuple(containers),
        devices=tuple(
            tuple(
                ContainerDevice(uuid=DeviceUUID(u), usedmem=mem, usedcores=cores, idx=i)
                for i, (u, mem, cores) in enumerate(slot)
            )
            for slot in slots
        ),
    )


class ScriptedSource:
    """A usage source at our port that returns what the test sets (or raises)."""

    def __init__(self, name: str = "scripted") -> None:
        self.name = name
        self.reading = SourceReading()
        self.error: Exception | None = None

    def collect(self, ledger: Ledger, now: float) -> SourceReading:
        if self.error is not None:
            raise self.error
        return self.reading

    def close(self) -> None:
        pass


def monitor_with(
    *sources: ScriptedSource, publish_interval_s: float = 10.0, max_containers: int = 256
) -> tuple[Monitor, list[Event]]:
    sent: list[Event] = []
    m = Monitor(
        "n1",
        sources,
        sent.append,
        MonitorOptions(publish_interval_s=publish_interval_s, max_containers_per_event=max_containers),
    )
    m.ledger.replace_all(
        [
            allocation(UID_A, "train", [[(GPU0, 1000, 30), (GPU1, 1000, 30)]]),
            allocation(UID_B, "infer", [[(GPU0, 500, 10)]]),
        ]
    )
    return m, sent


def promtool() -> str:
    """promtool from $GPUBUS_PROMTOOL, PATH, or scripts/get-promtool (Debian's prometheus package).

    Unavailable means skip, except where ``GPUBUS_REQUIRE_PROMTOOL`` is set (CI): there it fails.
    """
    found, why = _find_promtool()
    if found:
        return found
    if os.environ.get("GPUBUS_REQUIRE_PROMTOOL"):
        pytest.fail(f"promtool required but unavailable: {why}")
    pytest.skip(f"promtool unavailable: {why}")


@functools.cache
def _find_promtool() -> tuple[str, str]:
    """(path, "") or ("", why); looked up once per session so an unreachable registry costs one try."""
    explicit = os.environ.get("GPUBUS_PROMTOOL") or shutil.which("promtool")
    if explicit:
        return explicit, ""
    try:
        done = subprocess.run(
            [str(REPO / "scripts" / "get-promtool")], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return "", f"scripts/get-promtool could not run: {e}"
    if done.returncode != 0:
        return "", f"scripts/get-promtool failed: {done.stderr.strip()[-300:]}"
    return done.stdout.strip().splitlines()[-1], ""


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
