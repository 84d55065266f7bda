"""The leader's sweep of Allocate leases on a real nats-server: a lease that outlived its TTL on
the server (as a restarted replica may keep one) is deleted when its owner is gone, never when
its owner is alive or within a TTL of a new holder."""

from __future__ import annotations

from asyncwait import wait_until

from services.scheduler.leases import AllocLeases
from shared.bus import LOCKS, Bus

ALIVE = "pod-alive"


async def test_leases_past_their_ttl_with_their_owner_gone_are_swept(bus: Bus) -> None:
    kv = await bus.kv(LOCKS)
    # written without a per-key TTL: the bucket's own (30 s) outlasts the test, as a key the
    # server failed to expire would
    await kv.put("alloc.node-a.1", b"pod-gone")
    await kv.put("alloc.node-a.2", ALIVE.encode())
    async with AllocLeases(bus, ttl=3.0, owner_alive=lambda owner: owner == ALIVE) as leases:
        await wait_until(lambda: leases.holder_hint("alloc.node-a.2") == ALIVE, 10, what="the watch's hints")
        assert await leases.sweep() == 0, "nothing is swept within its TTL and a grace of its first sighting"

        async def swept() -> bool:
            await leases.sweep()
            return await kv.get("alloc.node-a.1") is None
        await wait_until(swept, 30, what="the dead owner's lease swept")
        assert leases.swept >= 1
        assert (await kv.get("alloc.node-a.2")) is not None, "a live owner's lease is kept"
        # a key its dead owner's successor took since is a new sighting: kept for another TTL
        await kv.put("alloc.node-a.1", b"pod-gone-too")
        await wait_until(lambda: leases.holder_hint("alloc.node-a.1") == "pod-gone-too", 10,
                         what="the new holder")
        assert await leases.sweep() == 0
        assert await kv.get("alloc.node-a.1") is not None
