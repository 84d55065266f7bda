"""The node-agent across failures: its own restart, a kubelet restart mid-life, and NATS going away.

Cases: decisions written while the agent was down are rebuilt from KV; a pod the kubelet
already holds is not left pending after a restart (pod resources reconcile), so a later pod of
the same size is not ambiguous; with NATS down the kubelet still gets the right answer from the
cache and the events arrive once NATS is back; Allocate keeps working after a kubelet restart; a
decision published while the server had lost the agent's consumer (which the consumer's slow
heartbeats notice only after 30 s) reaches the kubelet's call that waits for it, by a resync;
a call whose decision never comes resyncs again every second it waits (a re-creation can fail
during a cluster's election, and nothing else would retry it before the heartbeats).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from asyncwait import wait_until
from natsproc import NatsServerProcess
from test_node_agent_rig import make_bus_settings, rig

from gpubus_local.sim.kubelet import AdmissionError
from services.node_agent.app import DECISION_SUBJECTS
from shared.bus import STREAM, Bus
from shared.events import AllocationApplied


def limits(envs: dict[str, str]) -> tuple[str, ...]:
    return tuple(envs[k] for k in sorted(envs) if k.startswith("CUDA_DEVICE_MEMORY_LIMIT_"))


async def test_restarted_agent_rebuilds_pending_decisions_from_kv(bus: Bus) -> None:
    async with rig(bus) as r:
        await r.stop_agent()
        decision = r.allocation("while-down", [(0, 1234, 12)], [(0, 100, 1), (1, 200, 2)])
        await r.decide(decision, event=False)  # only the ledger has it; the event went by unseen
        await r.start_agent()
        answers = await r.kubelet.admit(r.pod(decision))
        assert limits(answers["c0"].envs) == ("1234m",)
        assert limits(answers["c1"].envs) == ("100m", "200m")


async def test_restarted_agent_does_not_keep_pods_the_kubelet_already_holds(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=0.3) as r:
        served = r.allocation("served", [(0, 1000, 10)])
        await r.decide(served)
        await r.kubelet.admit(r.pod(served))
        await r.stop_agent()  # the ledger still says DECIDED: the scheduler has not caught up
        await r.start_agent()
        assert r.agent is not None and served.pod_uid not in r.agent.handoff.table
        follower = r.allocation("follower", [(1, 5000, 50)])
        await r.decide(follower)
        answer = (await r.kubelet.admit(r.pod(follower)))["c0"]
        assert limits(answer.envs) == ("5000m",)


async def test_allocate_works_after_a_kubelet_restart(bus: Bus) -> None:
    async with rig(bus) as r:
        await r.kubelet.restart()
        await r.kubelet.wait_for(lambda: r.kubelet.registrations == 2 and len(r.kubelet.devices()) == 8)
        decision = r.allocation("after", [(1, 700, 7)])
        await r.decide(decision)
        assert limits((await r.kubelet.admit(r.pod(decision)))["c0"].envs) == ("700m",)


async def test_a_decision_on_a_lost_consumer_reaches_the_waiting_allocate_by_a_resync(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=5.0) as r:
        lost = [info.name for info in await bus.js.consumers_info(STREAM)
                if set(info.config.filter_subjects or [info.config.filter_subject]) & set(DECISION_SUBJECTS)]
        assert lost
        for name in lost:  # as when the server that held it died and ours lives on
            await bus.js.delete_consumer(STREAM, name)
        decision = r.allocation("lost", [(0, 900, 9)])
        await r.decide(decision)
        answers = await r.kubelet.admit(r.pod(decision))
        assert limits(answers["c0"].envs) == ("900m",)
        assert r.metric("gpubus_node_agent_decision_resyncs_total") >= 1


async def test_a_call_whose_decision_never_comes_resyncs_again_while_it_waits(bus: Bus) -> None:
    async with rig(bus, allocate_wait_s=4.0) as r:
        never = r.allocation("never", [(0, 900, 9)])  # decided nowhere
        with pytest.raises(AdmissionError, match="no allocation decided"):
            await r.kubelet.admit(r.pod(never))
        assert r.metric("gpubus_node_agent_decision_resyncs_total") >= 2  # at 0.5 s, 1.5 s, ...


@pytest_asyncio.fixture
async def private_bus(private_nats: NatsServerProcess) -> AsyncIterator[Bus]:
    b = await Bus.connect(make_bus_settings(private_nats.url), source="test-private")
    await b.ensure_schema()
    try:
        yield b
    finally:
        private_nats.start()
        await b.close()


async def test_nats_down_during_allocate_still_answers_and_delivers_events_later(
    private_bus: Bus, private_nats: NatsServerProcess
) -> None:
    async with rig(private_bus) as r:
        decision = r.allocation("offline", [(0, 2500, 25)])
        await r.decide(decision)
        assert r.agent is not None
        agent = r.agent
        await wait_until(lambda: decision.pod_uid in agent.handoff.table, what="decision cached")
        private_nats.stop()
        await wait_until(lambda: not private_bus.is_connected, what="bus disconnected")
        answer = (await r.kubelet.admit(r.pod(decision)))["c0"]
        assert limits(answer.envs) == ("2500m",)
        assert private_bus.outbox_size >= 1 and not r.of(AllocationApplied)
        private_nats.start()
        await wait_until(
            lambda: len(r.of(AllocationApplied)) == 1, timeout=20, what="applied after NATS returned"
        )
        assert r.of(AllocationApplied)[0].pod_uid == decision.pod_uid
