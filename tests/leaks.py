"""What a component left open after a failed ``async with``: this process's sockets and asyncio tasks.

:func:`nothing_left_open` takes both before the block and checks, once the block raised, that every
socket and task made since is gone again (a closed transport lets go of its socket, and an ended
subscription of its reader task, a loop turn later, so it waits for both with a timeout). gRPC's
own socket pair is not the block's: grpc.aio keeps one while any of its objects exists (started or
not, closed or not) until the object is freed, which a reference cycle may put off until a garbage
collection. The check holds a channel of its own throughout, so that pair is there before and after.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from asyncwait import wait_until


def sockets() -> set[str]:
    """The sockets this process holds, as ``socket:[inode]``."""
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own fd among them)
            continue
        if target.startswith("socket:"):
            held.add(target)
    return held


def describe(held: set[str]) -> list[str]:
    """What each ``socket:[inode]`` is, from /proc/net: a unix socket's path (or "unnamed"), or a
    TCP socket's local and remote address and state (hex, as the kernel lists them)."""
    inodes = {h[len("socket:["):-1]: h for h in held}
    found: dict[str, str] = {}
    for table in ("unix", "tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if table == "unix" and len(fields) >= 7 and fields[6] in inodes:
                found[fields[6]] = f"unix {fields[7] if len(fields) > 7 else 'unnamed'}"
            elif table != "unix" and len(fields) >= 10 and fields[9] in inodes:
                found[fields[9]] = f"{table} {fields[1]} -> {fields[2]} state {fields[3]}"
    return sorted(f"{inodes[i]} {found.get(i, 'not in /proc/net')}" for i in inodes)


#: How long a closed part may take to let go of its socket or task (gRPC's core closes its
#: listeners on its own threads: seconds on a loaded machine), before it counts as left open.
LEAK_WAIT_S = 30.0


def tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if not t.done()}


@asynccontextmanager
async def nothing_left_open() -> AsyncIterator[None]:
    """Wrap a block that must fail: no socket or task it made may outlive it."""
    engine = grpc.aio.insecure_channel("unix:/nonexistent/gpubus-leak-check.sock")  # never dialled
    try:
        sockets_before, tasks_before = sockets(), tasks()
        yield
        try:
            await wait_until(lambda: not (sockets() - sockets_before), timeout=LEAK_WAIT_S,
                             what="the failed start's sockets to close")
        except AssertionError as e:  # name them: a socket of another test's client counts here too
            raise AssertionError(f"{e}: {describe(sockets() - sockets_before)}") from None
        # a drained subscription's reader task ends a loop turn after its drain returns
        await wait_until(lambda: tasks() <= tasks_before, timeout=LEAK_WAIT_S,
                         what=f"the failed start's tasks to end: {tasks() - tasks_before}")
    finally:
        await engine.close()
