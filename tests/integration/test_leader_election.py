"""The scheduler's leader election on a real nats-server: a leader whose set-up NATS interrupts
steps down and campaigns again instead of ending the election (and with it the process)."""

from __future__ import annotations

import asyncio

from asyncwait import wait_until

from services.scheduler.leader import LeaderElection
from shared.bus import LOCKS, Bus
from shared.errors import BusUnavailable

KEY = "leader.scheduler"


async def test_a_set_up_cut_by_nats_is_retried_not_fatal(bus: Bus) -> None:
    calls: list[str] = []

    async def elected() -> None:
        calls.append("elected")
        if calls.count("elected") == 1:
            raise BusUnavailable("subscribe gpubus.allocation.applied.>: JetStream temporarily unavailable")

    async def deposed() -> None:
        calls.append("deposed")

    election = LeaderElection(bus, key=KEY, replica="r1", ttl=3.0, on_elected=elected, on_deposed=deposed)
    running = asyncio.create_task(election.run())
    try:
        await wait_until(lambda: calls.count("elected") == 2, 15, what="a second campaign won")
        assert not running.done(), running
        assert election.is_leader
        assert calls[:3] == ["elected", "deposed", "elected"], calls
        holder = await (await bus.kv(LOCKS)).get(KEY)
        assert holder is not None and holder.value == b"r1"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert calls[-1] == "deposed", calls
    assert await (await bus.kv(LOCKS)).get(KEY) is None, "a stopped leader gives its lease back"
