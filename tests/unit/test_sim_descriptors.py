"""The simulated-nodes process checks its open-file limit before it starts its nodes.

Real limits in child processes (a process may lower its own limits, and raise its soft limit up to
the hard one): nothing is mocked.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpubus_local.sim.descriptors import BASE_FDS, descriptors_needed, nodes_that_fit

ROOT = Path(__file__).resolve().parents[2]


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)


def test_the_need_grows_with_the_nodes_and_with_what_the_process_hosts() -> None:
    assert descriptors_needed(0, hosts=True, agents=True) == BASE_FDS
    hosts = descriptors_needed(5000, hosts=True, agents=False)
    agents = descriptors_needed(5000, hosts=False, agents=True)
    assert hosts > 20000 > agents  # 5000 kubelets are past a 20,000 limit; their agents are not
    assert descriptors_needed(5000, hosts=False, agents=True, node_identity=True) > agents
    assert descriptors_needed(5000, hosts=True, agents=True) > hosts
    for limit in (1000, 20000, 65536):
        fit = nodes_that_fit(limit, hosts=True, agents=False)
        assert descriptors_needed(fit, hosts=True, agents=False) <= limit
        assert descriptors_needed(fit + 1, hosts=True, agents=False) > limit


def test_a_low_soft_limit_is_raised_to_what_the_nodes_need() -> None:
    done = _child(
        "import resource\n"
        "from gpubus_local.sim.descriptors import ensure_descriptors, descriptors_needed\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "need = descriptors_needed(200, hosts=True, agents=True)\n"
        "assert need > 256, need\n"
        "ensure_descriptors(200, hosts=True, agents=True)\n"
        "print(need, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    assert done.returncode == 0, done.stderr
    need, soft = (int(x) for x in done.stdout.split())
    assert need == soft


def test_sim_nodes_past_the_hard_limit_refuses_to_start_and_says_how_many_fit() -> None:
    done = _child(
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1000, 1000))\n"
        "from gpubus.cli import main\n"
        "sys.argv = ['gpubus', 'sim-nodes', '--nodes', '5000', '--devices', '8xA100-80GB',\n"
        "            '--kubeconfig', '/nonexistent/kubeconfig', '--nats', 'nats://127.0.0.1:1',\n"
        "            '--part', 'hosts', '--hosts-dir', '/nonexistent/hosts']\n"
        "main()\n")
    assert done.returncode != 0
    fit = nodes_that_fit(1000, hosts=True, agents=False)
    assert (f"5000 simulated nodes' kubelets need about {descriptors_needed(5000, hosts=True, agents=False)} "
            f"open files, but this process may open at most 1000") in done.stderr
    assert f"{fit} nodes fit" in done.stderr
