"""How a task doing long work gives the rest of the broker a turn between two slices.

trio runs every task that is runnable at the start of a pass of its loop, then polls
the sockets. A task that takes a slice of long work in every pass (a queue leasing a
PULLB of 1,000 jobs, obliterating a million, a connection encoding a long reply) is
in every pass, so a request of another client, which crosses a pass or two before its
reply is written (read, then served, often inline in the same step), waits for one of
those slices in each: another queue waited for two slices, and for the slow ones more.

:func:`give_way` sits out one pass after a slice: the task checkpoints twice, and the
pass in between runs without it. A request that arrives during a slice is read in the
next pass, which the long work sits out; one that arrives during the pass sat out
waits for one slice at most. Another queue's client then waits for about one slice,
not two. The price is a scheduler pass per slice (far less than a slice) when nothing
else is runnable.
"""

from __future__ import annotations

from trio.lowlevel import checkpoint


async def give_way() -> None:
    """Let every other runnable task, and the sockets, have a pass without this one.

    Both checkpoints may raise ``trio.Cancelled``, like any checkpoint: long work
    stops there when its scope is cancelled (a broker stopping, a connection closed).
    """
    await checkpoint()  # this pass ends, the sockets are polled
    await checkpoint()  # the next pass: everyone else's steps, this one only yields
