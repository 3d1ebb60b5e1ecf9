"""give_way: a task doing long work sits out a pass of trio's loop after each slice."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from trioqueue.turns import give_way


class PassCounter(trio.abc.Instrument):
    """Numbers the passes of trio's loop (each ends with a poll of the sockets)."""

    def __init__(self) -> None:
        self.passes = 0

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1


async def passes_of_slices(between: Callable[[], Awaitable[None]]) -> list[int]:
    """The pass each of 20 slices ran in, with a busy other task beside them."""
    counter = PassCounter()
    trio.lowlevel.add_instrument(counter)
    seen: list[int] = []

    async def long_work() -> None:
        for _ in range(20):
            seen.append(counter.passes)
            await between()

    async def other() -> None:
        while len(seen) < 20:
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(long_work)
        nursery.start_soon(other)
    trio.lowlevel.remove_instrument(counter)
    return seen


async def test_a_slice_is_never_in_the_pass_right_after_the_last() -> None:
    seen = await passes_of_slices(give_way)
    assert all(b - a == 2 for a, b in zip(seen, seen[1:], strict=False)), seen


async def test_a_plain_checkpoint_takes_a_slice_every_pass() -> None:
    # What give_way changes: without it, the other task shares every pass with a slice.
    seen = await passes_of_slices(trio.lowlevel.checkpoint)
    assert all(b - a == 1 for a, b in zip(seen, seen[1:], strict=False)), seen
