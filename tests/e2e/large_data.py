"""What the tests of large data's steps share: a frame made beforehand answered, a wait
until the broker has freed what it let go of, a batch holding one large job, a
refused push of many values, and the bounds only a C extension meets."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import trio

from trioqueue.core import presized
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import LongestStep, measured
from trioqueue.transport.large import long_strings

#: Why a step bound is out of reach where an extension is not loaded (under
#: TRIOQUEUE_PURE_PYTHON, or without a compiler), or None where it is.
NO_PRESIZED = (None if presized.IMPLEMENTATION == "C" else
               "without core/_presized a large map's dict grows by its own resizes, "
               "each a copy of every entry in one call")
NO_PIECES = (None if long_strings.HAVE_PIECES else
             "without transport/_pieces a long string or body is joined from its pieces "
             "in one call")


async def answer(client: RawClient, frame: bytes) -> dict[str, Any]:
    """Send a frame made beforehand (its encoding is the test's, not measured) and read
    its reply."""
    await client.send_raw(frame)
    with trio.fail_after(60):
        reply: dict[str, Any] = await client.receive()
    return reply


async def until_freed(server: Server) -> None:
    """Until the broker has taken apart what it let go of (a deadline, not a sleep)."""
    graveyard = server.broker.dismantler.graveyard
    with trio.fail_after(30):
        while graveyard.pending:
            await trio.sleep(0.01)


async def answered_and_freed(server: Server, client: RawClient, frame: bytes, *,
                             queue: str | None = None) -> dict[str, Any]:
    """The reply to ``frame`` (made beforehand), once the broker has taken apart what
    the command let go of; with ``queue``, after that queue's next step (a count of
    its jobs) has let go of what the command read."""
    reply = await answer(client, frame)
    if queue is not None:
        await client.ok("GetJobCounts", queue=queue)
    await until_freed(server)
    return reply


def pushb_around(client: RawClient, data: Any) -> bytes:
    """The frame of a PUSHB of three jobs to ``q``: one of ``data`` between two small
    ones."""
    jobs = [{"name": "small", "data": {"n": 1}}, {"name": "large", "data": data},
            {"name": "small", "data": {"n": 2}}]
    return client.frame({"cmd": "PUSHB", "queue": "q", "jobs": jobs, "reqId": "pb"})


async def refused_push_of_many_values(server: Server, client: RawClient,
                                      bound_ms: float) -> None:
    """A PUSH of 300,000 small lists under the custom id ``same``, which a job of empty
    data pushed before holds, its steps held to ``bound_ms`` until what it let go of is
    freed: it answers with the job already there (bunqueue's rule), whose data is
    unchanged."""
    data = {str(i): [i] for i in range(300_000)}
    frame = client.frame({"cmd": "PUSH", "queue": "q", "jobId": "same", "data": data,
                          "reqId": "dup"})

    reply = await measured("refused PUSH", partial(answered_and_freed, server, client,
                                                   frame), bound_ms)
    assert reply["id"] == "same"
    assert (await client.ok("GetJob", id="same"))["job"]["data"] == {}


def held_to(steps: LongestStep, what: str, bound_ms: float, c_only: str | None) -> None:
    """``steps`` held to ``bound_ms``; where ``c_only`` says why only a C extension, not
    loaded, meets it, a step past it skips the test with the step measured. Called last,
    so the rest of the test has run on the pure-Python path as well."""
    if c_only is not None and steps.worst_ms >= bound_ms:
        pytest.skip(f"pure Python: the longest step of {what} was {steps.worst_ms:.0f} ms "
                    f"of CPU against a bound of {bound_ms:.0f} ms ({c_only})")
    steps.check(what, bound_ms)
