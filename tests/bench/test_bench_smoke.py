"""Every benchmark in bench/ runs once in its ``--smoke`` mode (tiny sizes), so none rots unseen.

Figures are printed, never asserted (speed is for the benchmarks to report); what is checked is
that each script starts, runs its whole path against the real parts it drives, prints its
figures and exits 0. A new bench/*.py is picked up here and must take ``--smoke`` too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def test_bench_holds_the_benchmarks_the_readme_reports() -> None:
    assert {"allocate.py", "e2e.py", "fit.py", "webhook.py"} <= set(SCRIPTS)


@pytest.mark.timeout(200)  # seconds of work each, but a loaded machine stretches start and stop
@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_runs_in_smoke_mode(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], cwd=BENCH.parent,
                          capture_output=True, text=True, timeout=190, check=False)
    assert done.returncode == 0, (
        f"{script} --smoke exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    assert any(ch.isdigit() for ch in done.stdout), f"{script} printed no figures:\n{done.stdout}"
