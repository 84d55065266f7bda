#!/usr/bin/env python3
"""Remove what a killed image-suite run left behind: its compose stacks and their port forwards.

A test run killed while tests/image had a stack up never takes it down. Its containers, volumes and
network stay, and worse, netavark's port-forward rules can outlive even those: a rule
``-A NETAVARK-HOSTPORT-DNAT ... --dport P ... -j NETAVARK-DN-<net>`` keeps sending every
connection to 127.0.0.1:P to the dead container's address, so a test server that later gets port P
from the kernel refuses every connection (CI lost a whole run to one). Run by .ci/run before the
suite; stdlib only. Removes only ``gpubus-test-*`` projects and forwards whose container is gone.

    scripts/podman_sweep.py [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys

#: The project prefix tests/image gives its stacks.
PREFIX = "gpubus-test-"
#: netavark's comment on a port forward's jump: ``dnat name: <network> id: <container id>``.
FORWARD = re.compile(r'--dport (?P<port>\d+) .*"dnat name: (?P<network>\S+) id: (?P<id>[0-9a-f]+)" '
                     r"-j (?P<chain>NETAVARK-DN-\S+)")


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def leftover_projects() -> set[str]:
    listed = run("podman", "ps", "--all", "--format", "json")
    if listed.returncode != 0:
        return set()
    projects = ((entry.get("Labels") or {}).get("com.docker.compose.project", "")
                for entry in json.loads(listed.stdout or "[]"))
    return {project for project in projects if project.startswith(PREFIX)}


def remove_project(project: str, dry_run: bool) -> None:
    label = f"label=com.docker.compose.project={project}"
    containers = run("podman", "ps", "--all", "--quiet", "--filter", label).stdout.split()
    volumes = run("podman", "volume", "ls", "--quiet", "--filter", label).stdout.split()
    print(f"podman_sweep: leftover stack {project}: {len(containers)} containers, {len(volumes)} volumes")
    if dry_run:
        return
    if containers:
        run("podman", "rm", "--force", "--time", "0", *containers)
    if volumes:
        run("podman", "volume", "rm", "--force", *volumes)
    run("podman", "network", "rm", "--force", f"{project}_default")


def orphan_forwards(rules: list[str], container_exists: dict[str, bool]) -> list[tuple[str, str]]:
    """(port, chain) of each port forward whose container is gone, from ``iptables -t nat -S``."""
    orphans = []
    for rule in rules:
        if not rule.startswith("-A NETAVARK-HOSTPORT-DNAT "):
            continue
        found = FORWARD.search(rule)
        if found and not container_exists.get(found["id"], True):
            orphans.append((found["port"], found["chain"]))
    return orphans


def remove_orphan_forwards(dry_run: bool) -> None:
    if shutil.which("iptables") is None:
        return
    listed = run("iptables", "-t", "nat", "-S")
    if listed.returncode != 0:
        return  # not root, or no nat table: nothing of ours to clean
    rules = listed.stdout.splitlines()
    ids = {found["id"] for rule in rules if (found := FORWARD.search(rule))}
    exists = {cid: run("podman", "container", "exists", cid).returncode == 0 for cid in ids}
    for port, chain in orphan_forwards(rules, exists):
        print(f"podman_sweep: port forward of 127.0.0.1:{port} to a container that is gone")
        if dry_run:
            continue
        for table_chain in ("NETAVARK-HOSTPORT-DNAT", chain):
            delete_rules(table_chain, port)


def delete_rules(chain: str, port: str) -> None:
    """Every rule of ``chain`` matching ``--dport port``, by number, the highest first."""
    listed = run("iptables", "-t", "nat", "-L", chain, "-n", "--line-numbers")
    numbers = [int(line.split()[0]) for line in listed.stdout.splitlines()[2:]
               if line.split() and line.split()[0].isdigit() and re.search(rf"\bdpt:{port}\b", line)]
    for number in sorted(numbers, reverse=True):
        run("iptables", "-t", "nat", "-D", chain, str(number))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    args = parser.parse_args()
    if shutil.which("podman") is None:
        return 0
    for project in sorted(leftover_projects()):
        remove_project(project, args.dry_run)
    remove_orphan_forwards(args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
