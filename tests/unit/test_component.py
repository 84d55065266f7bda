"""The one component shape (:class:`shared.component.Component`).

Cases: the block's end closes the parts in reverse; a failure at any step of opening closes what
was opened, in reverse, and raises; ``aclose`` closes early and the block's end closes nothing
more; a component is entered once.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from shared.component import Component


class Parts(Component):
    """Opens parts ``a``, ``b``, ``c`` in order; ``fail_at`` names the step that raises."""

    def __init__(self, fail_at: str | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.closed: list[str] = []

    async def _open(self, exits: AsyncExitStack) -> None:
        for part in ("a", "b", "c"):
            if part == self.fail_at:
                raise OSError(f"cannot open {part}")
            exits.callback(self.closed.append, part)


async def test_the_blocks_end_closes_the_parts_in_reverse() -> None:
    async with Parts() as parts:
        assert parts.closed == []
    assert parts.closed == ["c", "b", "a"]


@pytest.mark.parametrize(("fail_at", "closed"), [("a", []), ("b", ["a"]), ("c", ["b", "a"])])
async def test_a_failed_step_closes_what_was_opened(fail_at: str, closed: list[str]) -> None:
    parts = Parts(fail_at)
    with pytest.raises(OSError, match=f"cannot open {fail_at}"):
        async with parts:
            pytest.fail("the block must not run")
    assert parts.closed == closed


async def test_aclose_closes_early_and_once() -> None:
    async with Parts() as parts:
        await parts.aclose()
        assert parts.closed == ["c", "b", "a"]
    assert parts.closed == ["c", "b", "a"]


async def test_a_component_is_entered_once() -> None:
    parts = Parts()
    async with parts:
        with pytest.raises(RuntimeError, match="entered once"):
            await parts.__aenter__()
