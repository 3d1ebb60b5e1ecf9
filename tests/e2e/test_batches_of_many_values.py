"""Job data of many small values in shapes the large-data slices did not reach: many
batch jobs each holding a few thousand values, a listing of finished jobs holding such
data, pushes of such data in frames under the write-ahead size, and data whose values
sit in containers too small to be opened one by one. None of them may hold the event
loop for one long step; the data read back is the data pushed.

The steps are measured in the broker's thread CPU time per task step
(``LongestStep``), leaving out the test's own task, over a real socket to an
in-process broker on LMDB, the collector tuned as ``trioqueue serve`` tunes it.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import measured

from .large_data import until_freed

StartServer = Callable[..., Awaitable[Server]]

#: A step of the broker's own is a slice (about 0.5 ms) or a small command; the rest is
#: the shared machine's noise.
STEP_CPU_MS = 15.0

pytestmark = [pytest.mark.usefixtures("served_gc"), pytest.mark.engines("lmdb")]


async def _answers(client: RawClient, frames: list[bytes]) -> list[dict[str, Any]]:
    """Send frames made beforehand in one write (their encoding is the test's, not
    measured) and read one reply per frame."""
    await client.send_raw(b"".join(frames))
    replies = []
    with trio.fail_after(60):
        for _ in frames:
            replies.append(await client.receive())
    return replies


async def _measured(what: str, work: Callable[[], Awaitable[Any]]) -> Any:
    # what the test made (the data, its frames) moved out of the young generation
    # first: the broker's young collections would traverse it, a cost a client in
    # another process does not put on the broker; the numbers shown (with -s) are
    # docs/benchmarks.md's
    gc.collect()
    return await measured(what, work, STEP_CPU_MS, shown=True)


async def _freed_after(server: Server, client: RawClient, cmd: str, **fields: Any
                      ) -> dict[str, Any]:
    """``cmd``'s reply, once the queue's next step has let go of what it read and the
    broker has freed all it let go of in slices."""
    reply = await client.ok(cmd, **fields)
    await client.ok("GetJobCounts", queue="q")
    await until_freed(server)
    return reply


def _ints(n: int, seed: int) -> list[int]:
    return [(seed + i) % 100 for i in range(n)]


def _maps(n: int, seed: int) -> list[dict[str, int]]:
    return [{"a": seed, "b": i % 7} for i in range(n)]


SHAPES = {
    # 500 jobs of 8,000 integers: 4M values, each job under the write-ahead count
    "ints": (500, partial(_ints, 8000)),
    # 400 jobs of 2,500 small maps: 1M maps
    "maps": (400, partial(_maps, 2500)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
async def test_a_pushb_of_many_jobs_each_of_some_thousand_values_holds_no_long_step(
        start_server: StartServer, shape: str) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    count, make = SHAPES[shape]
    datas = [make(i) for i in range(count)]
    frame = client.frame({"cmd": "PUSHB", "queue": "q", "reqId": "pb",
                          "jobs": [{"name": "j", "data": data} for data in datas]})

    [reply] = await _measured("PUSHB", partial(_answers, client, [frame]))
    assert reply["ok"] is True, reply
    assert len(reply["ids"]) == count
    got = []
    while len(got) < count:
        pulled = await client.ok("PULLB", queue="q", count=250, timeout=0)
        assert pulled["jobs"], "fewer jobs than pushed"
        got += [job["data"] for job in pulled["jobs"]]
    assert got == datas
    await client.aclose()


async def test_a_pushf_of_many_jobs_each_of_some_thousand_values_holds_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    children = [f"c{i}" for i in range(400)]
    jobs = [{"id": "parent", "queue": "q", "input": {
        "name": "p", "data": {"n": 1}, "childrenIds": children, "dependsOn": children}}]
    jobs += [{"id": child, "queue": "q", "input": {"name": "c", "data": {"rows": _ints(8000, i)},
                                                    "parentId": "parent"}}
             for i, child in enumerate(children)]
    frame = client.frame({"cmd": "PUSHF", "jobs": jobs, "reqId": "pf"})

    [reply] = await _measured("PUSHF", partial(_answers, client, [frame]))
    assert reply["ok"] is True, reply
    for i in (0, 199, 399):
        got = await client.ok("GetJob", id=f"c{i}")
        assert got["job"]["data"] == {"rows": _ints(8000, i)}
    await client.aclose()


LISTED = {
    # 250 finished jobs of 8,000 integers each (a long listing: its reply is encoded
    # a slice of jobs at a time)
    "many": (250, partial(_ints, 8000)),
    # 12 finished jobs of 200,000 integers each: their data kept apart from the record
    "kept": (12, partial(_ints, 200_000)),
}


@pytest.mark.parametrize("codec", ["msgpack", pytest.param("cbor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape", sorted(LISTED))
async def test_a_listing_of_finished_jobs_of_many_values_holds_no_long_step(
        start_server: StartServer, shape: str, codec: str) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port, codec)
    count, make = LISTED[shape]
    datas = [make(i) for i in range(count)]
    for start in range(0, count, 50):
        await client.ok("PUSHB", queue="q", jobs=[
            {"name": "j", "data": data} for data in datas[start:start + 50]])
    done = 0
    while done < count:
        pulled = await client.ok("PULLB", queue="q", count=50, timeout=0)
        ids = [job["id"] for job in pulled["jobs"]]
        await client.ok("ACKB", ids=ids)
        done += len(ids)
    await until_freed(server)

    async def listing() -> dict[str, Any]:
        # the records read back from the store, decoded in slices; then let go of by
        # the queue's next step and freed in slices
        reply = await client.ok("GetJobs", queue="q", state="completed", limit=count)
        await client.ok("GetJobCounts", queue="q")
        await until_freed(server)
        return reply

    listed = await _measured("GetJobs", listing)
    assert sorted(job["data"] for job in listed["jobs"]) == sorted(datas)
    await client.aclose()


async def test_pushes_of_many_integers_in_small_frames_hold_no_long_step(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    # each frame under 256 KiB (the size that used to decide writing ahead); a read of
    # several is taken by the queue in one step and committed together
    datas = [_ints(200_000, i) for i in range(8)]
    frames = [client.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": str(i)})
              for i, data in enumerate(datas)]
    assert all(len(frame) < 256 * 1024 for frame in frames)

    replies = await _measured("PUSH", partial(_answers, client, frames))
    assert all(reply["ok"] is True for reply in replies), replies
    for reply, data in zip(replies, datas, strict=True):
        assert (await client.ok("GetJob", id=reply["id"]))["job"]["data"] == data
    await client.aclose()


def _nest(width: int, depth: int, seed: int = 0) -> Any:
    """``depth`` levels of lists of ``width`` members, integers at the bottom."""
    if depth == 0:
        return seed % 100
    return [_nest(width, depth - 1, seed * width + i) for i in range(width)]


def _nest_maps(width: int, depth: int) -> Any:
    """Maps of ``width`` keys down to lists of ``width`` integers."""
    if depth == 1:
        return list(range(width))
    return {str(i): _nest_maps(width, depth - 1) for i in range(width)}


NESTS = {
    # 15^5 = 759,375 integers in lists of 15 (under both the opening size and msgpack's
    # wide-array size)
    "lists15": lambda: _nest(15, 5),
    # 31^4 = 923,521 integers in lists of 31
    "lists31": lambda: _nest(31, 4),
    # maps of 31 keys down to lists of 31: 923,521 integers
    "maps31": lambda: _nest_maps(31, 4),
}


# (maps31 by default: maps down to lists; the lists-only shapes under -m slow)
@pytest.mark.parametrize("shape", [shape if shape == "maps31" else pytest.param(
    shape, marks=pytest.mark.slow) for shape in sorted(NESTS)])
async def test_data_of_a_million_values_in_small_containers_holds_no_long_step(
        start_server: StartServer, shape: str) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    data = {"deep": NESTS[shape]()}
    frame = client.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "p"})

    [reply] = await _measured("PUSH", partial(_answers, client, [frame]))
    assert reply["ok"] is True, reply
    job_id = reply["id"]
    pulled = await _measured("PULL", partial(client.ok, "PULL", queue="q", timeout=0))
    assert pulled["job"]["data"] == data

    await _measured("ACK", partial(_freed_after, server, client, "ACK", id=job_id,
                                   result="done"))
    # read back from the store, decoded, the reply encoded, then freed
    got = await _measured("GetJob", partial(_freed_after, server, client, "GetJob",
                                            id=job_id))
    assert got["job"]["state"] == "completed"
    assert got["job"]["data"] == data
    await client.aclose()


async def test_a_refused_pushb_of_jobs_of_some_thousand_values_leaves_nothing(
        start_server: StartServer) -> None:
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    # their rows are encoded ahead; the last job is bad, so the whole batch is refused
    jobs: list[dict[str, Any]] = [{"name": "j", "data": _ints(4000, i)} for i in range(20)]
    jobs.append({"name": "bad", "data": {}, "priority": "x"})
    reply = await client.call("PUSHB", queue="q", jobs=jobs)
    assert reply["ok"] is False and reply["error"].startswith("jobs[20]: "), reply
    counts = await client.ok("GetJobCounts", queue="q")
    assert not any(counts["counts"].values()), counts
    storage: Any = server.broker.storage
    assert not storage._kept.ahead  # (the rows encoded ahead, let go of)
    with storage._env.begin() as txn:
        assert txn.stat(storage._data)["entries"] == 0
        assert txn.stat(storage._ahead)["entries"] == 0
    # and accepted, each job's data is read back as pushed
    ids = (await client.ok("PUSHB", queue="q", jobs=jobs[:20]))["ids"]
    with storage._env.begin() as txn:
        assert txn.stat(storage._data)["entries"] == 20  # (kept apart, written once)
    for job_id, job in zip(ids, jobs, strict=False):
        assert (await client.ok("GetJob", id=job_id))["job"]["data"] == job["data"]
    await client.aclose()
