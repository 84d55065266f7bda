"""Benchmark B7: recovery time of each fault of the fault matrix, under a steady load.

Starts a supervised ``gpubus up`` stack on a 3-server NATS cluster (per-node identity on, the
node-agents in a process of their own) and runs tests/e2e/fault_matrix.py's matrix: one
nats-server, the JetStream meta leader, the scheduler, the node-agents and the webhook SIGKILLed in
turn (the supervisor restarts each), then two servers of three stopped for ``--quorum-hold``
seconds and started again. Prints, for each fault, the time from the fault (from quorum back) to
the next pod bound, then whether any device was ever over-committed and whether the ledger
matches the pods (the same invariant check as the tests).

    .venv/bin/python bench/faults.py                     # 3 nodes, 2 pods/s, quorum lost 20 s
    .venv/bin/python bench/faults.py --rate 5 --quorum-hold 40
    .venv/bin/python bench/faults.py --smoke             # 2 nodes, the webhook and the scheduler only
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]

from e2e_harness import running_stack  # noqa: E402
from fault_matrix import FAULTS, run_matrix  # noqa: E402

from gpubus_local.stack import StackSpec  # noqa: E402


def _configure(spec: StackSpec) -> StackSpec:
    return dataclasses.replace(spec, nats_cluster=3, agents_apart=True)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="gpubus-faults-") as scratch:
        async with running_stack(Path(scratch) / "stack", nodes=args.nodes, devices="2xA100-80GB",
                                 split_count=20, configure=_configure) as e2e:
            faults = ("webhook", "scheduler") if args.smoke else FAULTS
            results = await run_matrix(e2e, rate=args.rate, quorum_hold_s=args.quorum_hold, faults=faults,
                                       report=print)
            print(f"\n{'fault':<12} {'victim':<16} {'to the next bound pod':>22}")
            for r in results:
                held = f"  (quorum lost {r.outage_s:.0f}s, from its return)" if r.fault == "quorum" else ""
                print(f"{r.fault:<12} {r.victim:<16} {r.recovery_s:>21.2f}s{held}")
            try:
                await e2e.check_invariants(settle_s=60.0)
                print("invariants: 0 over-commits on replay, ledger == pods, no stuck lease")
            except AssertionError as e:
                print(f"invariants VIOLATED: {e}")
                raise SystemExit(1) from None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rate", type=float, default=2.0, help="Pods created per second.")
    parser.add_argument("--quorum-hold", type=float, default=20.0,
                        help="Seconds two of three servers stay down (longer than a heartbeat stays fresh).")
    parser.add_argument("--smoke", action="store_true",
                        help="CI's check that the script runs: 2 nodes, the webhook and scheduler faults.")
    arguments = parser.parse_args()
    if arguments.smoke:
        arguments.nodes = 2
    asyncio.run(main(arguments))
