"""What the bus relies on of nats-py's private attributes, pinned against a real server.

Each case exercises one function of :mod:`shared.bus.natspy` as the bus uses it; a nats-py upgrade
that renames or changes what it reaches breaks these loudly (and the adapter raises NatsPyChanged):

- ordered consumers: one started by time and prepared is re-created from a sequence by
  :func:`resume` (no refusal for its start time, no replay, no gap); a named one comes back under
  a new name;
- :func:`unsubscribe_push` on a closed connection ends the heartbeat and flow-control tasks;
- KV key validation and the JetStream API prefix (with and without a domain);
- a pull request on a pull subscription's inbox, and the connection's closed state.
"""

from __future__ import annotations

import asyncio
import time

import nats
import pytest
from asyncwait import wait_until
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from shared.bus import STREAM, Bus, natspy
from shared.bus.consumer import start_policy

SUBJECT = "gpubus.usage.report.natspy-test"
"""A subject of the event stream no other test of this module's bus writes."""


async def _follow(bus: Bus, got: list[bytes], *,
                  name: str | None = None) -> JetStreamContext.PushSubscription:
    """An ordered consumer from a minute ago, prepared as the bus prepares its own."""
    async def on_msg(msg: Msg) -> None:
        got.append(msg.data)

    config = api.ConsumerConfig(name=name)
    start_policy(config, time.time() - 60)
    sub = await bus.js.subscribe(SUBJECT, stream=STREAM, cb=on_msg, ordered_consumer=True,
                                 idle_heartbeat=2.0, config=config)
    natspy.prepare(sub, 0)
    return sub


async def test_a_prepared_consumer_started_by_time_resumes_from_a_sequence_without_a_gap(bus: Bus) -> None:
    got: list[bytes] = []
    for body in (b"1", b"2"):
        await bus.js.publish(SUBJECT, body)
    sub = await _follow(bus, got)
    try:
        await wait_until(lambda: got == [b"1", b"2"], what="the stored messages")
        await natspy.resume(sub, 2, "test")
        await bus.js.publish(SUBJECT, b"3")
        await wait_until(lambda: got == [b"1", b"2", b"3"], what="the next message, once")
    finally:
        await natspy.unsubscribe_push(sub)


async def test_a_named_consumer_comes_back_under_a_new_name(bus: Bus) -> None:
    got: list[bytes] = []
    sub = await _follow(bus, got, name="natspy-named")
    try:
        await natspy.resume(sub, 0, "test")
        await bus.js.publish(SUBJECT, b"after")
        # under its old name the re-creation would be an update the server refuses (error 10012)
        await wait_until(lambda: got == [b"after"], what="delivery on the re-created consumer")
        names = {c.name for c in await bus.js.consumers_info(STREAM) if c.config.filter_subject == SUBJECT}
        renamed = {n for n in names - {"natspy-named"} if len(n) == 16}  # secrets.token_hex(8)
        assert "natspy-named" in names and len(renamed) == 1, names
    finally:
        await natspy.unsubscribe_push(sub)


def _nats_tasks() -> set[asyncio.Task[object]]:
    names = ("activity_check", "check_flow_control_response")
    return {t for t in asyncio.all_tasks() if not t.done() and any(n in repr(t.get_coro()) for n in names)}


async def test_unsubscribing_on_a_closed_connection_ends_nats_pys_tasks(bus: Bus, nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    before = _nats_tasks()
    sub = await nc.jetstream().subscribe(SUBJECT, stream=STREAM, ordered_consumer=True, idle_heartbeat=2.0)
    assert len(_nats_tasks() - before) == 2  # what nats-py would leave running
    await nc.close()
    await natspy.unsubscribe_push(sub)
    await wait_until(lambda: not (_nats_tasks() - before), what="the heartbeat and flow-control tasks to end")


@pytest.mark.parametrize(("key", "valid"), [("node-1", True), ("alloc.node-1.GPU-0", True),
                                            ("a b", False), ("", False), ("a.", False)])
def test_kv_keys_are_checked_as_nats_py_checks_them(key: str, valid: bool) -> None:
    assert natspy.is_valid_key(key) is valid


async def test_the_api_prefix_follows_the_domain(bus: Bus) -> None:
    assert natspy.api_prefix(bus.js) == "$JS.API"
    assert natspy.api_prefix(bus.nc.jetstream(domain="hub")) == "$JS.hub.API"


async def test_a_pull_request_brings_a_message_to_the_subscriptions_inbox(bus: Bus, nats_url: str) -> None:
    await bus.js.publish(SUBJECT, b"pulled")
    psub = await bus.js.pull_subscribe(SUBJECT, durable="natspy-pull", stream=STREAM)
    try:
        assert not natspy.connection_closed(bus.js)
        await natspy.request_pull(bus.js, psub, b'{"batch": 1, "expires": 2000000000}')
        msg = await natspy.next_message(psub, 5.0)
        assert msg.data == b"pulled"
    finally:
        await psub.unsubscribe()
        await bus.js.delete_consumer(STREAM, "natspy-pull")
    nc = await nats.connect(nats_url)
    await nc.close()
    assert natspy.connection_closed(nc.jetstream())


def test_a_missing_attribute_names_itself() -> None:
    with pytest.raises(natspy.NatsPyChanged, match="object has no _sub"):
        natspy.prepare(object(), 0)  # type: ignore[arg-type]
