"""The fault matrix under steady load (tests/e2e/fault_matrix.py): one nats-server, the JetStream
meta leader, the scheduler, the node-agents and the webhook SIGKILLed in turn, then NATS quorum
lost and regained, on a supervised 3-server cluster stack with per-node identity.

After each fault pods resume being scheduled and the supervisor brought the victim back; after
all of them, the shared invariants: no over-commit on replay, the ledger equals the live pods, no
stuck lease. Recovery times are printed (bench/faults.py prints them too), never asserted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from e2e_harness import E2E, running_stack
from fault_matrix import FAULTS, run_matrix

from gpubus_local.stack import StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest_asyncio.fixture
async def e2e(tmp_path: Path) -> AsyncIterator[E2E]:
    def configure(spec: StackSpec) -> StackSpec:
        return dataclasses.replace(spec, nats_cluster=3, agents_apart=True)

    async with running_stack(tmp_path / "stack", nodes=3, devices="2xA100-80GB", split_count=20,
                             configure=configure) as handle:
        yield handle


async def test_every_fault_is_recovered_from_without_an_over_commit(e2e: E2E) -> None:
    results = await run_matrix(e2e, report=print)
    assert [r.fault for r in results] == list(FAULTS)
    print("\n" + "\n".join(f"{r.fault:<12} {r.victim:<16} recovery {r.recovery_s:6.2f}s" for r in results))
    await e2e.check_invariants(settle_s=60.0)
