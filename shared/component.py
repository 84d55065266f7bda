"""The one shape of every service and long-lived component: an async context manager.

``async with X(settings, ...) as x:`` opens ``x``'s parts in order in :meth:`Component._open`, each
registered on an :class:`~contextlib.AsyncExitStack` as it is opened. Leaving the block closes them
in reverse order (:meth:`Component.aclose` does it earlier), and so does a failure at any step
of opening: a half-opened component leaves
nothing behind (no task, no socket, no connection). The constructor only builds plain objects; the
parts that need I/O are assigned in ``_open`` and nowhere else.

Must not know any service, the bus or the CLI.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Self


class Component:
    """Base of a long-lived component: subclasses call ``super().__init__()`` and define ``_open``."""

    def __init__(self) -> None:
        self._exits = contextlib.AsyncExitStack()
        self._entered = False

    async def _open(self, exits: contextlib.AsyncExitStack) -> None:
        """Open the parts in order, pushing each one's close on ``exits`` as soon as it is open."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError(f"{type(self).__name__} is entered once")
        self._entered = True
        try:
            await self._open(self._exits)
        except BaseException:
            await self._exits.aclose()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close what was opened, in reverse, before the block ends (as httpx's ``aclose``: a test
        that stops a replica part-way); the block's own end then closes nothing more."""
        await self._exits.aclose()
