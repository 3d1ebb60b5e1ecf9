"""Job data of many small values within the data limit, stored, read back and freed
without one long step of the event loop: its row encoded and written ahead a slice at a
time (actors/ahead_writes.py, storage/value_pieces.py), read back from the store and
decoded a slice at a time (actors/store_reads.py), its values taken apart a slice at a
time when the job goes (core/graveyard.py).

The steps are measured in the broker's thread CPU time, per task, leaving out the
test's own task (it encodes the frame and decodes the replies in the same loop), with
the garbage collector tuned as ``trioqueue serve`` tunes it (an embedded broker leaves
the host's policy alone, whose full collections traverse every value made).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio

from trioqueue.server import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import LongestStep

StartServer = Callable[..., Awaitable[Server]]

#: A step of the broker's own is a slice (about 0.5 ms) or a small command; the rest is
#: the shared machine's noise. Before, the PUSH's step took 180-300 ms and the ACK's 40.
STEP_CPU_MS = 15.0
#: A million small maps: 8M characters of JSON, within the 10M limit.
MANY_MAPS = 1_000_000


pytestmark = pytest.mark.usefixtures("served_gc")  # (tests/conftest.py)


async def _answer(client: RawClient, frame: bytes) -> dict[str, Any]:
    """Send a frame made beforehand (its encoding is the test's, not measured) and read
    its reply."""
    await client.send_raw(frame)
    with trio.fail_after(60):
        reply: dict[str, Any] = await client.receive()
    return reply


async def _measured(what: str, work: Callable[[], Awaitable[Any]],
                    bound_ms: float = STEP_CPU_MS) -> Any:
    steps = LongestStep(skip=trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    try:
        result = await work()
    finally:
        trio.lowlevel.remove_instrument(steps)
    steps.check(what, bound_ms)
    return result


async def _freed(server: Server) -> None:
    """Until the broker has taken apart what it let go of (a deadline, not a sleep)."""
    graveyard = server.broker.dismantler.graveyard
    with trio.fail_after(30):
        while graveyard.pending:
            await trio.sleep(0.01)


async def test_a_push_and_ack_of_a_million_small_maps_hold_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = [{"a": 1}] * MANY_MAPS
    frame = client.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "p"})

    reply = await _measured("PUSH", partial(_answer, client, frame))
    assert reply["ok"] is True, reply
    job_id = reply["id"]
    pulled = await client.ok("PULL", queue="q", timeout=0)  # (the reply side: not measured)
    assert pulled["job"]["id"] == job_id and pulled["job"]["data"] == data

    async def ack() -> None:
        await client.ok("ACK", id=job_id, result="done")
        await _freed(server)

    await _measured("ACK", ack)

    async def state() -> dict[str, Any]:
        # the finished record and its data read back from the store, decoded in slices
        # (its reply carries no data: the reply's own encoding is not measured here),
        # then let go of by the queue's next step and freed in slices
        reply = await client.ok("GetState", id=job_id)
        await client.ok("GetJobCounts", queue="q")
        await _freed(server)
        return reply

    assert (await _measured("GetState", state))["state"] == "completed"
    got = await client.ok("GetJob", id=job_id)  # read back from the store
    assert got["job"]["state"] == "completed"
    assert got["job"]["data"] == data
    await client.aclose()


@pytest.mark.engines("lmdb")  # (PostgreSQL writes nothing ahead: freed with its request)
async def test_a_refused_push_of_many_values_leaves_nothing_and_frees_in_slices(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = {str(i): [i] for i in range(300_000)}
    await client.ok("PUSH", queue="q", jobId="same", data={})
    frame = client.frame({"cmd": "PUSH", "queue": "q", "jobId": "same", "data": data,
                          "reqId": "dup"})

    async def push() -> dict[str, Any]:
        await client.send_raw(frame)
        with trio.fail_after(60):
            reply = await client.receive()
        await _freed(server)
        return reply

    reply = await _measured("refused PUSH", push)
    # a duplicate custom id answers with the job already there (bunqueue's rule)
    assert reply["id"] == "same"
    assert (await client.ok("GetJob", id="same"))["job"]["data"] == {}
    storage: Any = server.broker.storage
    with storage._env.begin() as txn:  # the rows written ahead for it: dropped
        assert txn.stat(storage._ahead)["entries"] == 0
    await client.aclose()


async def test_a_pushb_of_a_job_of_a_million_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = [{"a": 1}] * MANY_MAPS
    jobs = [{"name": "small", "data": {"n": 1}}, {"name": "large", "data": data},
            {"name": "small", "data": {"n": 2}}]
    frame = client.frame({"cmd": "PUSHB", "queue": "q", "jobs": jobs, "reqId": "pb"})

    reply = await _measured("PUSHB", partial(_answer, client, frame))
    assert reply["ok"] is True, reply
    assert len(reply["ids"]) == 3
    pulled = await client.ok("PULLB", queue="q", count=3, timeout=0)
    assert [job["data"] for job in pulled["jobs"]] == [{"n": 1}, data, {"n": 2}]
    await client.aclose()


async def test_a_flow_holding_a_job_of_a_million_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = {"rows": [{"a": 1}] * MANY_MAPS}
    jobs = [{"id": "parent", "queue": "q", "input": {"name": "p", "data": {"n": 1},
                                                      "childrenIds": ["child"],
                                                      "dependsOn": ["child"]}},
            {"id": "child", "queue": "q", "input": {"name": "c", "data": data,
                                                     "parentId": "parent"}}]
    frame = client.frame({"cmd": "PUSHF", "jobs": jobs, "reqId": "pf"})

    reply = await _measured("PUSHF", partial(_answer, client, frame))
    assert reply["ok"] is True, reply
    got = await client.ok("GetJob", id="child")
    assert got["job"]["data"] == data
    await client.aclose()


@pytest.mark.engines("lmdb")  # (PostgreSQL writes nothing ahead)
async def test_a_refused_pushb_of_many_values_leaves_no_rows(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = {str(i): [i] for i in range(300_000)}
    # its last job is bad: the whole batch is refused, after the large one was read
    jobs = [{"name": "large", "data": data}, {"name": "bad", "data": {}, "priority": "x"}]
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["ok"] is False and reply["error"].startswith("jobs[1]: "), reply
    counts = await client.ok("GetJobCounts", queue="q")
    assert not any(counts["counts"].values()), counts
    await _freed(server)
    # its data was written ahead, then let go of and taken apart in slices
    assert server.broker.dismantler.graveyard.freed > 0
    storage: Any = server.broker.storage
    with storage._env.begin() as txn:  # the rows written ahead for it: dropped
        assert txn.stat(storage._ahead)["entries"] == 0
    await client.aclose()
