"""Allocate latency: the handler alone and the round trip over the device plugin's unix socket.

For 1, 2, 4 and 8 devices per container it decides a pod, then calls Allocate the way the
kubelet does (one container per call) and reports p50/p99 in milliseconds. The handler figure
calls the servicer in-process (match + response build + cache dir + protobuf encode); the round
trip goes through a real grpc.aio server on a temp unix socket. Events go to an in-memory sink,
as they go to the bus outbox in production (Allocate never waits on NATS).
Goals: handler p99 <= 0.2 ms, round trip p99 <= 2.5 ms.

    .venv/bin/python bench/allocate.py [--iterations 1000] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import grpc

from proto.deviceplugin.v1beta1 import api_pb2 as pb
from proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from services.node_agent.advertised import Advertised
from services.node_agent.handoff import Handoff
from services.node_agent.metrics import NodeAgentMetrics
from services.node_agent.plugin import DevicePluginServicer
from services.node_agent.settings import NodeAgentSettings
from services.node_agent.simulated import SimulatedSource
from shared.events import Event
from shared.model import Allocation, ContainerDevice, NodeName, PodUID

SIZES = (1, 2, 4, 8)


class _Context:
    """The servicer only touches the context to abort, which a successful call never does."""

    async def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"{code}: {details}")


def decision(node: str, gpus: list[str], size: int) -> Allocation:
    devices = tuple(ContainerDevice(uuid=g, usedmem=1000, usedcores=10) for g in gpus[:size])  # type: ignore[arg-type]
    return Allocation(
        pod_uid=PodUID(uuid.uuid4().hex),
        namespace="bench",
        name="pod",
        node=NodeName(node),
        devices=(devices,),
        containers=("main",),
    )


def percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49] * 1000, q[98] * 1000


async def main(iterations: int, warmup: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-", dir="/tmp") as tmp:
        settings = NodeAgentSettings(
            node_name="bench", simulate="8xA100-80GB", hook_path=f"{tmp}/hook", plugin_dir=tmp, metrics_port=0
        )
        advertised = Advertised(SimulatedSource("bench", settings.simulate).devices(), settings)
        events: list[Event] = []
        handoff = Handoff(
            settings=settings,
            uuid_of=advertised.uuid_of,
            cards={d.id: d for d in advertised.snapshot.devices},
            emit=events.append,
            metrics=NodeAgentMetrics(),
            on_done=lambda a, c: None,
        )
        servicer = DevicePluginServicer(advertised, handoff, NodeAgentMetrics(), preferred=True)
        gpus = [d.id for d in advertised.snapshot.devices]
        socket = Path(tmp) / "bench.sock"
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(servicer, server)
        server.add_insecure_port(f"unix:{socket}")
        await server.start()
        print(f"Allocate latency, {iterations} calls per size (ms)")
        print(f"{'devices':>7} {'handler p50':>12} {'handler p99':>12} {'rtt p50':>9} {'rtt p99':>9}")
        async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            for size in SIZES:
                request = pb.AllocateRequest(
                    container_requests=[
                        pb.ContainerAllocateRequest(devices_ids=[f"{g}-0" for g in gpus[:size]])
                    ]
                )
                handler: list[float] = []
                rtt: list[float] = []
                for i in range(iterations + warmup):  # the first `warmup` calls are not counted
                    handoff.decided(decision("bench", gpus, size))
                    started = time.perf_counter()
                    await servicer.Allocate(request, _Context())
                    if i >= warmup:
                        handler.append(time.perf_counter() - started)
                    handoff.decided(decision("bench", gpus, size))
                    started = time.perf_counter()
                    await stub.Allocate(request)
                    if i >= warmup:
                        rtt.append(time.perf_counter() - started)
                h50, h99 = percentiles(handler)
                r50, r99 = percentiles(rtt)
                print(f"{size:>7} {h50:>12.3f} {h99:>12.3f} {r50:>9.3f} {r99:>9.3f}")
        await server.stop(None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--smoke", action="store_true", help="a few calls per size: proves the bench runs")
    args = parser.parse_args()
    asyncio.run(main(3, 1) if args.smoke else main(args.iterations, 50))
