"""Podman and the compose stack, driven through scripts/image exactly as the README tells a user.

Knows how to ask podman whether it can run here, how to run a command in an image, and how to
bring docker-compose.yml up under a project of its own (free host ports, its own volumes), wait
until every service is healthy and take it all down again. Knows nothing about gpubus itself.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "image"
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "deploy" / "podman" / "containers.conf")}
IMAGE = "localhost/gpubus:dev"
SIM_IMAGE = "localhost/gpubus-sim:dev"
TOOLS = ("podman", "runc", "mmdebstrap", "podman-compose")
#: docker-compose.yml's host ports, each moved to a free one so the test never meets a user's stack.
PORT_VARIABLES = ("NATS_PORT", "NATS_MONITOR_PORT", "GPUBUS_API_PORT", "GPUBUS_WEBHOOK_PORT",
                  "GPUBUS_EXTENDER_PORT", "GPUBUS_METRICS_PORT", "GPUBUS_DASHBOARD_PORT")


def unusable() -> str | None:
    """Why podman cannot run the image suite on this machine, or None when it can."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"podman is not usable here: no {', '.join(missing)} (`scripts/image setup` installs them)"
    info = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], env=ENV,
                          capture_output=True, text=True, timeout=120, check=False)
    if info.returncode != 0:
        return f"podman is not usable here: `podman info` failed: {info.stderr.strip()[-300:]}"
    return None


def run(*argv: str | Path, timeout: float = 120,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` with podman's settings; the caller checks the outcome."""
    return subprocess.run([str(a) for a in argv], env=env or ENV, capture_output=True, text=True,
                          timeout=timeout, check=False)


def build_images() -> str:
    """scripts/image's report (the images and their sizes); fails with its output if it failed."""
    done = run(SCRIPT, timeout=1500)
    assert done.returncode == 0, f"scripts/image failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def in_image(image: str, *argv: str, entrypoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a throw-away container of ``image`` (its entrypoint unless ``entrypoint``)."""
    head = ["podman", "run", "--rm", "--network=none"]
    if entrypoint is not None:
        head.append(f"--entrypoint={entrypoint}")
    return run(*head, image, *argv)


#: Where the stack's host ports are drawn from: below the kernel's ephemeral range, so that a port
#: forward a killed run leaves behind can never catch a port the kernel gives another test's server.
_PORTS_FROM = 20000


def free_port() -> int:
    """A free loopback port below the ephemeral range (any free one where that range starts lower)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    below = range(_PORTS_FROM, low)
    candidates = random.sample(below, min(200, len(below)))
    for port in [*candidates, 0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise AssertionError("no free loopback port")


@dataclass
class Container:
    name: str
    service: str
    state: str
    exit_code: int


@dataclass
class ComposeStack:
    """docker-compose.yml under project ``project`` with host ports of its own."""

    project: str
    ports: dict[str, int] = field(default_factory=lambda: {name: free_port() for name in PORT_VARIABLES})

    def env(self) -> dict[str, str]:
        return {**ENV, "COMPOSE_PROJECT_NAME": self.project, **{k: str(v) for k, v in self.ports.items()}}

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run(SCRIPT, "compose", *args, timeout=timeout, env=self.env())

    def containers(self) -> dict[str, Container]:
        """service -> its container, from podman's labels (podman-compose and docker compose set them)."""
        listed = run("podman", "ps", "--all", "--format", "json",
                     "--filter", f"label=com.docker.compose.project={self.project}")
        assert listed.returncode == 0, listed.stderr
        found = {}
        for entry in json.loads(listed.stdout or "[]"):
            service = entry["Labels"]["com.docker.compose.service"]
            found[service] = Container(name=entry["Names"][0], service=service, state=entry["State"],
                                       exit_code=int(entry.get("ExitCode") or 0))
        return found

    def healthy(self, container: Container) -> bool:
        """Runs the container's healthcheck now: without systemd podman never runs it by itself."""
        return run("podman", "healthcheck", "run", container.name, timeout=30).returncode == 0

    def wait_healthy(self, services: set[str], one_shot: set[str], timeout: float) -> None:
        """Until each of ``services`` passes its healthcheck and each ``one_shot`` exited 0."""
        deadline = time.monotonic() + timeout
        pending = set(services) | set(one_shot)
        while pending:
            containers = self.containers()
            for service in sorted(pending):
                container = containers.get(service)
                if container is None:
                    continue
                if service in one_shot:
                    if container.state == "exited":
                        exited = container.exit_code
                        assert exited == 0, self.report(f"{service} exited {exited}")
                        pending.discard(service)
                elif container.state == "running" and self.healthy(container):
                    pending.discard(service)
            if pending and time.monotonic() > deadline:
                raise AssertionError(self.report(f"not healthy after {timeout:.0f}s: {sorted(pending)}"))
            if pending:
                time.sleep(1)  # the healthchecks' own pace; each poll runs them all again

    def report(self, problem: str) -> str:
        """``problem`` with every container's state and the end of its log."""
        lines = [problem]
        for service, container in sorted(self.containers().items()):
            logs = run("podman", "logs", "--tail", "15", container.name)
            lines.append(f"--- {service} ({container.state}, exit {container.exit_code})")
            lines.append((logs.stdout + logs.stderr).strip())
        return "\n".join(lines)

    def down(self) -> None:
        """Containers, network and volumes of the project gone, whatever state they were left in."""
        self.compose("down", "-v", "-t", "5", timeout=300)
        leftover = [c.name for c in self.containers().values()]
        if leftover:
            run("podman", "rm", "--force", "--time", "0", *leftover)
        for volume in ("state", "nats-data"):
            run("podman", "volume", "rm", "--force", f"{self.project}_{volume}")
        run("podman", "network", "rm", "--force", f"{self.project}_default")
