"""``gpubus up`` supervises its children the way a cluster does: a process that dies is started
again after a backoff, and said so; the stack stops only when one keeps dying.

The pure part is :class:`Backoff` (the delay before each restart, and when restarts have become a
crash loop). :class:`Supervisor` watches every child and every embedded nats-server (one server of
a cluster lost leaves the others serving while it comes back) and restarts what dies; it returns
the name and exit code of a process in a crash loop, which is when ``gpubus up`` gives up. It
knows the stack's parts only through :class:`Supervised`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpubus_local.natscluster import EmbeddedCluster
from gpubus_local.natsserver import EmbeddedNats
from shared.tasks import cancel_and_wait

if TYPE_CHECKING:
    from gpubus_local.stack import Child, Stack

log = logging.getLogger(__name__)

#: How often a nats-server's exit is looked for (a Popen has no exit notification).
_NATS_POLL_S = 0.2


@dataclass(frozen=True, slots=True, kw_only=True)
class RestartPolicy:
    initial_s: float = 0.5
    """Delay before the first restart of a run of deaths, seconds; doubled each time after."""
    max_s: float = 10.0
    """Longest delay between a death and the restart, seconds."""
    limit: int = 5
    """Restarts within ``window_s`` after which the next death is a crash loop (the stack stops)."""
    window_s: float = 60.0
    """A process alive this long since its last restart starts a fresh run of deaths, seconds."""


@dataclass(slots=True)
class Backoff:
    """Restart bookkeeping of one process (pure: the caller gives the time)."""

    policy: RestartPolicy
    restarts: deque[float] = field(default_factory=deque)

    def next_delay(self, now: float) -> float | None:
        """The delay before restarting a process that died at ``now``; None for a crash loop."""
        while self.restarts and now - self.restarts[0] > self.policy.window_s:
            self.restarts.popleft()
        if len(self.restarts) >= self.policy.limit:
            return None
        delay = min(self.policy.max_s, self.policy.initial_s * 2.0 ** len(self.restarts))
        self.restarts.append(now + delay)
        return delay


@dataclass(frozen=True, slots=True, kw_only=True)
class Supervised:
    """One process of the stack as the supervisor sees it."""

    name: str
    wait_exit: Callable[[], Awaitable[int]]
    """Returns the exit code once the process has died."""
    restart: Callable[[], Awaitable[object]]
    """Start it again and wait until it is ready (raises if it dies while starting)."""


class CrashLoop(Exception):
    """A process kept dying: ``name`` and its last exit code."""

    def __init__(self, name: str, code: int) -> None:
        super().__init__(f"{name} keeps dying (last exit code {code})")
        self.name, self.code = name, code


class Supervisor:
    """Restarts what dies; :meth:`run` ends (raising :class:`CrashLoop`) only for a crash loop."""

    def __init__(self, parts: Iterable[Supervised], *, report: Callable[[str], None],
                 policy: RestartPolicy = RestartPolicy(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._parts = list(parts)
        self._report = report
        """Told, in a line each, what died and that it came back."""
        self._policy = policy
        self._clock = clock
        self.restarts: dict[str, int] = {p.name: 0 for p in self._parts}
        """Completed restarts per process (tests wait on it)."""

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._keep(part), name=f"supervise-{part.name}") for part in self._parts]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a crash loop: raised here
        finally:
            await cancel_and_wait(*tasks)

    async def _keep(self, part: Supervised) -> None:
        backoff = Backoff(self._policy)
        while True:
            code = await part.wait_exit()
            while True:
                delay = backoff.next_delay(self._clock())
                if delay is None:
                    self._report(f"{part.name} died (exit code {code}) and keeps dying: giving up")
                    raise CrashLoop(part.name, code)
                self._report(f"{part.name} died (exit code {code}); restarting in {delay:.1f}s")
                await asyncio.sleep(delay)  # the backoff itself, not a wait for an outcome
                try:
                    await part.restart()
                except Exception as e:  # any failed start is one more death
                    log.warning("%s did not come back: %s", part.name, e)
                    code = -1
                    continue
                break
            self.restarts[part.name] += 1
            self._report(f"{part.name} is back")


async def wait_nats_exit(exit_code: Callable[[], int | None]) -> int:
    """The exit code of a nats-server process, once it has one."""
    while True:
        code = exit_code()
        if code is not None:
            return code
        await asyncio.sleep(_NATS_POLL_S)  # a liveness probe of a Popen, not a wait for an outcome


def stack_parts(stack: Stack) -> list[Supervised]:
    """Every child of a started stack and every embedded nats-server, as :class:`Supervised`."""
    parts = [Supervised(name=name, wait_exit=child.wait_exit,
                        restart=functools.partial(_restart_child, child, stack.spec.ready_timeout_s))
             for name, child in stack.children.items()]
    if isinstance(stack.nats, EmbeddedCluster):
        cluster = stack.nats
        parts += [Supervised(name=name, wait_exit=functools.partial(wait_nats_exit, server.exit_code),
                             restart=functools.partial(asyncio.to_thread, cluster.revive, name))
                  for name, server in cluster.servers.items()]
    elif isinstance(stack.nats, EmbeddedNats):
        server = stack.nats
        parts.append(Supervised(name="nats-server",
                                wait_exit=functools.partial(wait_nats_exit, server.exit_code),
                                restart=functools.partial(asyncio.to_thread, server.start)))
    return parts


async def _restart_child(child: Child, timeout: float) -> None:  # noqa: ASYNC109
    await child.start()
    try:
        await child.wait_ready(timeout)
    except BaseException:
        await child.kill()
        raise
