"""Admission round trip over HTTPS with keep-alive: p50/p99 latency as the API server would see it.

The webhook runs as ``gpubus webhook`` in a subprocess (its own process and event loop, as in a
cluster) with a trustme-generated certificate and, by default, a NATS URL nobody listens on (events
buffer; admission must not care); ``--nats`` gives it a real nats-server with the schema, so each
admission's ``pod.admitted`` is published and acked as in a cluster. One client connection is reused
for every request (keep-alive), and requests go one at a time, so each figure is a full round trip:
TLS record, HTTP parse, decode, admit, encode, response. Also printed: the webhook process's CPU per
admission (utime + stime from /proc over the measured requests). Goals: p99 <= 2 ms, CPU <= 0.5 ms.

    .venv/bin/python bench/webhook.py [--requests 5000] [--warmup 500] [--pod bare|shared|multi] [--nats]
        [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from natsproc import NatsServerProcess  # noqa: E402

from shared.bus import Bus, BusSettings  # noqa: E402

_CLK = os.sysconf("SC_CLK_TCK")

PODS: dict[str, dict[str, Any]] = {
    "bare": {
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    },
    "shared": {
        "containers": [
            {
                "name": "main",
                "image": "cuda",
                "env": [{"name": "A", "value": "1"}],
                "resources": {
                    "limits": {
                        "nvidia.com/gpu": "1",
                        "nvidia.com/gpumem": "3000",
                        "nvidia.com/gpucores": "30",
                        "nvidia.com/priority": "0",
                        "cpu": "2",
                        "memory": "4Gi",
                    }
                },
            },
            {"name": "sidecar", "image": "envoy", "resources": {"limits": {"cpu": "100m"}}},
        ]
    },
    "multi": {
        "initContainers": [
            {
                "name": "warm",
                "image": "cuda",
                "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}},
            }
        ],
        "containers": [
            {
                "name": f"w{i}",
                "image": "cuda",
                "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "25"}},
            }
            for i in range(4)
        ],
    },
}


def review(pod: str, i: int) -> bytes:
    spec = {"schedulerName": "default-scheduler", **PODS[pod]}
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": "bench"},
        "spec": spec,
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"uid-{i}",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": "bench",
                "name": f"p{i}",
                "object": obj,
            },
        }
    ).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"webhook exited with {proc.returncode}")
        try:
            async with session.get(f"{url}/readyz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            await asyncio.sleep(0.1)
    raise SystemExit("webhook did not become ready")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its threads included) from /proc, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


async def with_schema(url: str) -> None:
    """The streams the webhook publishes to, as ``gpubus up`` makes them."""
    bus = await Bus.connect(BusSettings(url=url), source="bench")
    try:
        await bus.ensure_schema()
    finally:
        await bus.close()


async def measure(
    url: str, ctx: ssl.SSLContext, pod: str, *, requests: int, warmup: int, proc: subprocess.Popen[bytes]
) -> tuple[list[float], float]:
    """Round-trip seconds of each measured request, and the webhook's CPU seconds over them."""
    connector = aiohttp.TCPConnector(ssl=ctx, limit=1, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector) as session:
        await wait_ready(session, url, proc)
        bodies = [review(pod, i) for i in range(requests + warmup)]
        headers = {"Content-Type": "application/json"}
        samples: list[float] = []
        cpu_before = 0.0
        for i, body in enumerate(bodies):
            if i == warmup:
                cpu_before = cpu_seconds(proc.pid)
            started = time.perf_counter()
            async with session.post(f"{url}/webhook", data=body, headers=headers) as resp:
                answer = await resp.read()
            elapsed = time.perf_counter() - started
            if resp.status != 200 or b'"allowed":true' not in answer:
                raise SystemExit(f"unexpected answer {resp.status}: {answer[:200]!r}")
            if i >= warmup:
                samples.append(elapsed)
        return samples, cpu_seconds(proc.pid) - cpu_before


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--pod", choices=sorted(PODS), default="shared")
    parser.add_argument("--nats", action="store_true",
                        help="a real nats-server: pod.admitted published and acked")
    parser.add_argument("--smoke", action="store_true", help="20 requests after 5, with --nats")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.warmup, args.nats = 20, 5, True

    ca = trustme.CA()
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        issued = ca.issue_cert("localhost", "127.0.0.1")
        issued.cert_chain_pems[0].write_to_path(str(cert))
        issued.private_key_pem.write_to_path(str(key))
        port = free_port()
        nats = NatsServerProcess(Path(tmp) / "nats") if args.nats else None
        bus_url = f"nats://127.0.0.1:{free_port()}"
        if nats is not None:
            nats.start()
            bus_url = nats.url
            asyncio.run(with_schema(bus_url))
        env = {**os.environ, "GPUBUS_BUS_URL": bus_url}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpubus",
                "webhook",
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--cert",
                str(cert),
                "--key",
                str(key),
                "--log-level",
                "error",
            ],
            env=env,
        )
        try:
            ctx = ssl.create_default_context()
            ca.configure_trust(ctx)
            samples, cpu = asyncio.run(
                measure(
                    f"https://localhost:{port}",
                    ctx,
                    args.pod,
                    requests=args.requests,
                    warmup=args.warmup,
                    proc=proc,
                )
            )
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            if nats is not None:
                nats.stop()
    samples.sort()
    q = statistics.quantiles(samples, n=100)
    body = len(review(args.pod, 0))
    print(
        f"webhook admission round trip over HTTPS, keep-alive, server in a subprocess "
        f"(pod={args.pod}, body {body} B, {len(samples)} requests after {args.warmup} warm-up, "
        f"{'a real nats-server' if args.nats else 'no NATS: events buffer'})"
    )
    print(
        f"  p50 {q[49] * 1e3:.3f} ms   p90 {q[89] * 1e3:.3f} ms   p99 {q[98] * 1e3:.3f} ms   "
        f"max {samples[-1] * 1e3:.3f} ms   ({len(samples) / sum(samples):.0f} req/s sequential)"
    )
    print(f"  goal p99 <= 2 ms: {'met' if q[98] <= 0.002 else 'NOT met'}")
    per = cpu / len(samples) * 1e3
    print(f"  webhook CPU {per:.3f} ms an admission (goal <= 0.5 ms: {'met' if per <= 0.5 else 'NOT met'}; "
          f"/proc ticks of 1/{_CLK} s over {len(samples)} requests)")


if __name__ == "__main__":
    main()
