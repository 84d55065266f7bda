"""Bind forwarding between replicas: a standby's ``/bind`` is answered by the leader over NATS.

The chart runs kube-scheduler next to every replica, calling its local extender; kube-scheduler's
leader election is independent of ours, so a standby can receive ``/bind``. Only the leader binds,
so it serves core request/reply on :data:`BIND_SUBJECT` (in a queue group: one replica answers
even while two briefly think they lead) and a standby sends the ``ExtenderBindingArgs`` there
and relays the ``ExtenderBindingResult``, asking again while none serves (a failover). No leader
within the budget, none answering in time, or a leader whose bind
failed with an exception (an error reply, not silence) is a clear Error.

Must not know HTTP, Fit or the ledger: the leader's local bind is handed in as a callable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import orjson

from services.scheduler.errors import ExtenderInputError
from services.scheduler.wire import BindingArgs, ExtenderBindingResult, load_body, parse_binding_args
from shared.bus import Bus, NoResponders, QueryFailed, Service
from shared.errors import BusUnavailable

log = logging.getLogger(__name__)

BIND_SUBJECT = "gpubus.query.scheduler.bind"
#: How often a standby asks again while no replica serves forwarded binds (a failover).
RETRY_S = 0.1
_QUEUE = "gpubus-scheduler-leader"

#: A bind done here: ``(outcome label, Error string)``, "" meaning bound.
LocalBind = Callable[[BindingArgs], Awaitable[tuple[str, str]]]


def encode_args(args: BindingArgs) -> bytes:
    body = {"PodName": args.pod_name, "PodNamespace": args.pod_namespace, "PodUID": args.pod_uid}
    return orjson.dumps({**body, "Node": args.node})


class BindForwarder:
    """Serve forwarded binds while leading (:meth:`serve` / :meth:`stop`); :meth:`forward` otherwise."""

    def __init__(
        self,
        bus: Bus,
        *,
        timeout_s: float,
        leader_name: Callable[[], str | None],
        on_bad: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self._bus = bus
        self._on_bad = on_bad
        self._timeout_s = timeout_s
        self._leader_name = leader_name
        self._service: Service | None = None
        self._bind: LocalBind | None = None

    async def serve(self, bind: LocalBind) -> None:
        """Start answering forwarded binds with ``bind`` (call when elected)."""
        self._bind = bind
        if self._service is None:
            self._service = await self._bus.serve(BIND_SUBJECT, self._on_request, queue=_QUEUE)

    async def stop(self) -> None:
        """Stop answering (call when deposed); binds already running finish and reply."""
        service, self._service = self._service, None
        if service is not None:
            await service.stop()

    async def _on_request(self, payload: bytes) -> bytes:
        try:
            args = parse_binding_args(load_body(payload))
        except ExtenderInputError as e:
            self._on_bad(e.kind)
            log.info("refused a forwarded bind (%s): %s", e.kind, e)
            return _result(f"forwarded bind: {e}")
        assert self._bind is not None
        _, error = await self._bind(args)
        return _result(error)

    async def forward(self, args: BindingArgs) -> tuple[str, str]:
        """Have the leader bind; ``(outcome, Error)`` with a clear Error when no leader answers.

        While no replica serves (a failover: the new leader has the lease, or is about to, and
        subscribes next), the request is sent again every :data:`RETRY_S` within the same budget:
        the bind waits for the new leader instead of failing at once and going round again.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        payload = encode_args(args)
        try:
            while True:
                try:
                    reply = await self._bus.request(BIND_SUBJECT, payload,
                                                    timeout=max(deadline - loop.time(), 0.001))
                    break
                except NoResponders:
                    if loop.time() + RETRY_S >= deadline:
                        raise
                    await asyncio.sleep(RETRY_S)
        except QueryFailed as e:
            log.warning("bind %s/%s: the leader failed the forwarded bind: %s",
                        args.pod_namespace, args.pod_name, e)
            return "leader_error", (
                f"the leader failed serving the forwarded bind ({e}); kube-scheduler will retry")
        except BusUnavailable as e:
            leader = self._leader_name() or "none elected"
            log.warning("bind %s/%s: no leader answered: %s", args.pod_namespace, args.pod_name, e)
            return "no_leader", (
                f"this scheduler replica is a standby and no leader answered the forwarded bind on "
                f"{BIND_SUBJECT} within {self._timeout_s:g}s (leader: {leader}); kube-scheduler will retry"
            )
        try:
            error = load_body(reply).get("Error", "")
        except ExtenderInputError as e:
            return "no_leader", f"the leader's answer to a forwarded bind is unusable: {e}"
        if not isinstance(error, str):
            return "no_leader", "the leader's answer to a forwarded bind has a non-string Error"
        return ("forwarded" if not error else "forwarded_error"), error


def _result(error: str) -> bytes:
    return orjson.dumps(ExtenderBindingResult(Error=error))
