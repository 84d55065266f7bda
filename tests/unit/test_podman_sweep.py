# ruff: noqa: E501 (the fakes print iptables output verbatim)
"""scripts/podman_sweep.py with ``podman`` and ``iptables`` replaced by fakes on PATH that log their calls.

Case matrix: a leftover ``gpubus-test-*`` stack is removed (containers, volumes, network) while a
user's own project is left alone; the port forward of a container that is gone is deleted from both
netavark chains (by rule number, the highest first) while a live container's forward stays;
``--dry-run`` removes nothing; without iptables the forwards are not touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "podman_sweep.py"

CONTAINERS = """[
 {"Labels": {"com.docker.compose.project": "gpubus-test-470"}},
 {"Labels": {"com.docker.compose.project": "mine"}},
 {"Labels": null}
]"""

NAT_RULES = """-P OUTPUT ACCEPT
-A OUTPUT -m addrtype --dst-type LOCAL -j NETAVARK-HOSTPORT-DNAT
-A NETAVARK-DN-2D70 -d 127.0.0.1/32 -p tcp -m tcp --dport 36743 -j DNAT --to-destination 10.89.0.9:17003
-A NETAVARK-DN-2D70 -d 127.0.0.1/32 -p tcp -m tcp --dport 40000 -j DNAT --to-destination 10.89.0.2:4222
-A NETAVARK-HOSTPORT-DNAT -p tcp -m tcp --dport 40000 -m comment --comment "dnat name: mine_default id: aaaa" -j NETAVARK-DN-2D70
-A NETAVARK-HOSTPORT-DNAT -p tcp -m tcp --dport 36743 -m comment --comment "dnat name: gpubus-test-470_default id: dead" -j NETAVARK-DN-2D70
"""

LISTING = {
    "NETAVARK-HOSTPORT-DNAT": """Chain NETAVARK-HOSTPORT-DNAT (2 references)
num  target     prot opt source               destination
1    NETAVARK-DN-2D70  6    --  0.0.0.0/0            0.0.0.0/0            tcp dpt:40000 /* dnat name: mine_default id: aaaa */
2    NETAVARK-DN-2D70  6    --  0.0.0.0/0            0.0.0.0/0            tcp dpt:36743 /* dnat name: gpubus-test-470_default id: dead */
""",
    "NETAVARK-DN-2D70": """Chain NETAVARK-DN-2D70 (2 references)
num  target     prot opt source               destination
1    NETAVARK-HOSTPORT-SETMARK  6    --  127.0.0.1            127.0.0.1            tcp dpt:36743
2    DNAT       6    --  0.0.0.0/0            127.0.0.1            tcp dpt:36743 to:10.89.0.9:17003
3    DNAT       6    --  0.0.0.0/0            127.0.0.1            tcp dpt:40000 to:10.89.0.2:4222
4    DNAT       6    --  0.0.0.0/0            127.0.0.1            tcp dpt:367430 to:10.89.0.3:1
""",
}

FAKE_PODMAN = """#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write("podman " + " ".join(args) + "\\n")
if args[:2] == ["ps", "--all"] and "json" in args:
    print(open(os.environ["FAKE_CONTAINERS"]).read())
elif args[:2] == ["ps", "--all"] and "--quiet" in args:
    print("c1\\nc2" if "project=gpubus-test-470" in args[-1] else "")
elif args[:2] == ["volume", "ls"]:
    print("gpubus-test-470_state" if "project=gpubus-test-470" in args[-1] else "")
elif args[:2] == ["container", "exists"]:
    sys.exit(0 if args[2] == "aaaa" else 1)
"""

FAKE_IPTABLES = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write("iptables " + " ".join(args) + "\\n")
if args[2:] == ["-S"]:
    print(open(os.environ["FAKE_RULES"]).read(), end="")
elif args[2] == "-L":
    print(json.load(open(os.environ["FAKE_LISTING"]))[args[3]], end="")
"""


def sweep(tmp_path: Path, *args: str, iptables: bool = True) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"podman": FAKE_PODMAN, **({"iptables": FAKE_IPTABLES} if iptables else {})}
    for name, text in fakes.items():
        (bin_dir / name).write_text(text.replace("/usr/bin/env python3", sys.executable, 1))
        (bin_dir / name).chmod(0o755)
    (tmp_path / "containers.json").write_text(CONTAINERS)
    (tmp_path / "rules").write_text(NAT_RULES)
    (tmp_path / "listing.json").write_text(json.dumps(LISTING))
    log = tmp_path / "log"
    log.touch()
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log),
           "FAKE_CONTAINERS": str(tmp_path / "containers.json"), "FAKE_RULES": str(tmp_path / "rules"),
           "FAKE_LISTING": str(tmp_path / "listing.json")}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines()


def test_a_leftover_test_stack_goes_and_a_users_project_stays(tmp_path: Path) -> None:
    calls = sweep(tmp_path)
    assert "podman rm --force --time 0 c1 c2" in calls
    assert "podman volume rm --force gpubus-test-470_state" in calls
    assert "podman network rm --force gpubus-test-470_default" in calls
    assert not any("mine" in call for call in calls if call.startswith(("podman rm", "podman network rm")))


def test_only_the_forward_of_a_gone_container_is_deleted_from_both_chains(tmp_path: Path) -> None:
    deletes = [call for call in sweep(tmp_path) if " -D " in call]
    # port 36743's jump (rule 2) and its two DN rules (2, then 1); never 40000's, nor 367430's
    assert deletes == ["iptables -t nat -D NETAVARK-HOSTPORT-DNAT 2",
                       "iptables -t nat -D NETAVARK-DN-2D70 2",
                       "iptables -t nat -D NETAVARK-DN-2D70 1"]


def test_a_dry_run_removes_nothing(tmp_path: Path) -> None:
    calls = sweep(tmp_path, "--dry-run")
    assert not [call for call in calls if " rm " in call or " -D " in call]
    assert "podman container exists dead" in calls  # it did look


def test_without_iptables_the_stacks_still_go(tmp_path: Path) -> None:
    calls = sweep(tmp_path, iptables=False)
    assert "podman rm --force --time 0 c1 c2" in calls
    assert not any(call.startswith("iptables") for call in calls)
