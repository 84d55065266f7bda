"""``bench/e2e.py --control-plane kubernetes --smoke``: the whole-stack bench on the real control plane.

Runs the bench's smoke size (2 real kubelets, 20 pods) against etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and real kubelets on the fake runtime; skips where the
binaries are not built (``scripts/kube-build``). Figures are printed, never asserted; what is
checked is that every pod started, none failed, no bind failed and no device was over-committed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpubus_local.kube.binaries import BinariesMissing, find_binaries

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)  # a stack of real components on a loaded 2-core machine
def test_e2e_bench_runs_on_the_real_control_plane() -> None:
    try:
        find_binaries(build=False)
    except BinariesMissing as e:
        pytest.skip(f"the real control plane is not built here: {e}")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "e2e.py"), "--smoke",
                           "--control-plane", "kubernetes"], cwd=ROOT,
                          capture_output=True, text=True, timeout=280, check=False)
    out = done.stdout
    assert done.returncode == 0, f"exited {done.returncode}:\n{out}\n{done.stderr[-3000:]}"
    assert "stack up (real control plane): 2 kubelets" in out, out
    assert re.search(r"started 20, failed 0, create errors 0, never started 0", out), out
    assert "0 over-commits" in out, out
    answers = re.search(r"extender answers: (.*)", out)
    assert answers is not None, out
    assert "bind bound=20" in answers.group(1), out
    assert not re.search(r"bind (?!bound)\w+=", answers.group(1)), f"a bind failed: {answers.group(1)}"
    for process in ("etcd", "kube-apiserver", "kubelets", "fake-cris", "kube-scheduler-gpubus", "scheduler"):
        figure = rf"CPU ms per started pod: (.*, )?{process} \d"
        assert re.search(figure, out), f"no CPU figure for {process}:\n{out}"
