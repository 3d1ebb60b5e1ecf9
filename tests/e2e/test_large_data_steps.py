"""Job data of many small values within the data limit, stored, read back and freed
without one long step of the event loop: its row encoded and written ahead a slice at a
time (actors/ahead_writes.py, storage/value_pieces.py), read back from the store and
decoded a slice at a time (actors/store_reads.py), its values taken apart a slice at a
time when the job goes (core/large_values/graveyard.py).

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

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import measured

from .large_data import answer, pushb_around, refused_push_of_many_values, until_freed

StartServer = Callable[..., Awaitable[Server]]

#: A step of the broker's own is a slice (about 0.5 ms) or a small command; the rest is
#: the shared machine's noise. Before, the PUSH's step took 180-300 ms and the ACK's 40.
STEP_CPU_MS = 15.0
#: A million small maps: 8M characters of JSON, within the 10M limit.
MANY_MAPS = 1_000_000


pytestmark = pytest.mark.usefixtures("served_gc")  # (tests/conftest.py)


async def test_a_push_and_ack_of_a_million_small_maps_hold_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = [{"a": 1}] * MANY_MAPS
    frame = client.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "p"})

    reply = await measured("PUSH", partial(answer, client, frame), STEP_CPU_MS)
    assert reply["ok"] is True, reply
    job_id = reply["id"]
    pulled = await client.ok("PULL", queue="q", timeout=0)  # (the reply side: not measured)
    assert pulled["job"]["id"] == job_id and pulled["job"]["data"] == data

    async def ack() -> None:
        await client.ok("ACK", id=job_id, result="done")
        await until_freed(server)

    await measured("ACK", ack, STEP_CPU_MS)

    async def state() -> dict[str, Any]:
        # the finished record and its data read back from the store, decoded in slices
        # (its reply carries no data: the reply's own encoding is not measured here),
        # then let go of by the queue's next step and freed in slices
        reply = await client.ok("GetState", id=job_id)
        await client.ok("GetJobCounts", queue="q")
        await until_freed(server)
        return reply

    assert (await measured("GetState", state, STEP_CPU_MS))["state"] == "completed"
    got = await client.ok("GetJob", id=job_id)  # read back from the store
    assert got["job"]["state"] == "completed"
    assert got["job"]["data"] == data
    await client.aclose()


@pytest.mark.engines("lmdb")  # (PostgreSQL writes nothing ahead: freed with its request)
async def test_a_refused_push_of_many_values_leaves_nothing_and_frees_in_slices(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue="q", jobId="same", data={})
    await refused_push_of_many_values(server, client, STEP_CPU_MS)
    storage: Any = server.broker.storage
    with storage._env.begin() as txn:  # the rows written ahead for it: dropped
        assert txn.stat(storage._ahead)["entries"] == 0
    await client.aclose()


async def test_a_pushb_of_a_job_of_a_million_small_maps_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = [{"a": 1}] * MANY_MAPS
    frame = pushb_around(client, data)

    reply = await measured("PUSHB", partial(answer, client, frame), STEP_CPU_MS)
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

    reply = await measured("PUSHF", partial(answer, client, frame), STEP_CPU_MS)
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
    await until_freed(server)
    # its data was written ahead, then let go of and taken apart in slices
    assert server.broker.dismantler.graveyard.freed > 0
    storage: Any = server.broker.storage
    with storage._env.begin() as txn:  # the rows written ahead for it: dropped
        assert txn.stat(storage._ahead)["entries"] == 0
    await client.aclose()
