"""Job data of many small values on PostgreSQL: neither the event loop nor the worker
thread that commits holds the interpreter for the whole of it.

PostgreSQL's commits and reads run in a worker thread. That thread holds the
interpreter lock while msgpack encodes or decodes (its C calls never let go of it), so
a record of a million small maps encoded there, or a finished record decoded there,
held the event loop as long as one step of the loop would have: the trio task steps
(``LongestStep``) never saw it. What these tests measure besides is the loop's own
wait: a task of the broker's run sleeps a millisecond at a time and notes how late it
wakes, counting only the lateness during which the process itself spent CPU (the
process's CPU time over the tick, all threads together, capped by the wall clock), so a
preemption by the machine's other load is not counted and a thread holding the
interpreter is.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import StoreEngine, make_config
from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import LongestStep
from trioqueue.transport.wire.framing import FrameDecoder

from .large_data import pushb_around, refused_push_of_many_values, until_freed

StartServer = Callable[..., Awaitable[Server]]

#: A step of the broker's own is a slice (about 0.5 ms) or a small command.
STEP_CPU_MS = 15.0
#: The loop's longest wait in CPU time: the worker thread gives the interpreter back
#: every switch interval (5 ms) between its short calls. Before: 50-100 ms for each
#: encoding or decoding of 600,000 small maps.
WAIT_CPU_MS = 30.0
TICK_S = 0.001
#: An Update's step: the core's walk of its data's types, one C call.
UPDATE_STEP_CPU_MS = 40.0
#: 600,000 small maps: 4.8M characters of JSON, within the 10M limit.
MANY_MAPS = 600_000

pytestmark = [pytest.mark.engines("postgres"), pytest.mark.usefixtures("served_gc")]


class LoopWait:
    """The longest the loop woke late for a sleep of :data:`TICK_S`, counted in the
    process's CPU time (see the module)."""

    def __init__(self) -> None:
        self.worst_ms = 0.0

    async def run(self) -> None:
        wall, cpu = time.perf_counter, time.process_time
        while True:
            started_wall, started_cpu = wall(), cpu()
            await trio.sleep(TICK_S)
            late_ms = 1000 * min(wall() - started_wall - TICK_S,
                                 cpu() - started_cpu)
            self.worst_ms = max(self.worst_ms, late_ms)


@asynccontextmanager
async def _watched(what: str, step_ms: float = STEP_CPU_MS) -> AsyncIterator[None]:
    """The broker's longest task step and the loop's longest wait, each held to its
    bound, while the block runs."""
    steps = LongestStep(skip=trio.lowlevel.current_task())
    wait = LoopWait()
    trio.lowlevel.add_instrument(steps)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait.run)
            await trio.sleep(0)
            yield
            nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(steps)
    steps.check(what, step_ms)
    assert wait.worst_ms < WAIT_CPU_MS, (
        f"{what}: the loop waited {wait.worst_ms:.0f} ms of CPU for a worker thread")


async def _connected(start_server: StartServer) -> tuple[Server, RawClient]:
    """A broker started for the test, and a client of it."""
    server = await start_server()
    return server, await RawClient.connect(server.tcp_port)


async def _ok_and_freed(server: Server, client: RawClient, frame: bytes) -> None:
    """Send ``frame`` (made beforehand), see it answered ok, and wait until the broker
    has taken apart what the command let go of."""
    assert client.codec.decode(await _raw_reply(client, frame))["ok"] is True
    await until_freed(server)


async def _active_job(client: RawClient) -> str:
    """The id of a job of empty data pushed to ``q`` and pulled."""
    job_id: str = (await client.ok("PUSH", queue="q", data={}))["id"]
    assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == job_id
    return job_id


async def _raw_reply(client: RawClient, frame: bytes) -> bytes:
    """Send ``frame``; the payload of the frame that answers it, not decoded (decoding a
    million maps is the test's own work, which would count as the loop's wait)."""
    await client.send_raw(frame)
    decoder = FrameDecoder(1 << 30)
    with trio.fail_after(60):
        while True:
            data = await client.stream.receive_some(1 << 16)
            assert data, "the broker closed the connection"
            payloads = decoder.feed(data)
            if payloads:
                assert len(payloads) == 1
                return bytes(payloads[0])


async def test_a_job_of_many_small_maps_holds_neither_the_loop_nor_its_thread(
        start_server: StartServer) -> None:
    server, client = await _connected(start_server)
    data = [{"a": 1}] * MANY_MAPS
    frame = client.frame({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "p"})

    async with _watched("PUSH"):
        pushed = await _raw_reply(client, frame)
    reply = client.codec.decode(pushed)
    assert reply["ok"] is True, reply
    job_id = reply["id"]

    async with _watched("PULL"):  # (the active record written again, with its data)
        pulled = await _raw_reply(client, client.frame({"cmd": "PULL", "queue": "q",
                                                         "timeout": 0, "reqId": "l"}))
    job = client.codec.decode(pulled)["job"]
    assert job["id"] == job_id and job["data"] == data
    del job, pulled

    async with _watched("ACK"):  # (the finished record written, the data freed)
        await client.ok("ACK", id=job_id, result="done")
        await until_freed(server)

    async with _watched("GetState"):  # (the finished record read back and decoded)
        assert (await client.ok("GetState", id=job_id))["state"] == "completed"
        await client.ok("GetJobCounts", queue="q")
        await until_freed(server)

    async with _watched("GetJobs"):  # (a page of finished records read back)
        raw = await _raw_reply(client, client.frame({"cmd": "GetJobs", "queue": "q",
                                                      "state": "completed", "reqId": "g"}))
        await client.ok("GetJobCounts", queue="q")  # (the queue's view lets go of it)
        await until_freed(server)
    listed = client.codec.decode(raw)
    assert [job["data"] for job in listed["jobs"]] == [data]
    del listed, raw

    got = await client.ok("GetJob", id=job_id)  # read back from the store, whole
    assert got["job"]["state"] == "completed"
    assert got["job"]["data"] == data
    await client.aclose()


async def test_a_refused_push_of_many_values_is_freed_in_slices(
        start_server: StartServer) -> None:
    server, client = await _connected(start_server)
    await client.ok("PUSH", queue="q", jobId="same", data={})
    graveyard = server.broker.dismantler.graveyard
    freed = graveyard.freed
    await refused_push_of_many_values(server, client, STEP_CPU_MS)
    # its data was let go of to the broker's task that frees in slices
    assert graveyard.freed > freed
    await client.aclose()


async def test_a_pushb_of_a_job_of_many_small_maps_holds_no_long_wait(
        start_server: StartServer) -> None:
    server, client = await _connected(start_server)
    data = [{"a": 1}] * MANY_MAPS
    frame = pushb_around(client, data)

    async with _watched("PUSHB"):
        pushed = await _raw_reply(client, frame)
    reply = client.codec.decode(pushed)
    assert reply["ok"] is True, reply
    got = await client.ok("GetJob", id=reply["ids"][1])
    assert got["job"]["data"] == data
    await client.aclose()



async def test_records_joined_from_data_encoded_ahead_survive_a_restart(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    """Records whose data was encoded ahead (a long string, many values) read back
    equal: live and finished, by a command and by the recovery of a new broker."""
    config = make_config(tmp_path, store_engine)
    text = "é" * (1 << 20)
    maps = [{"a": i} for i in range(100_000)]
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(config).run)
        client = await RawClient.connect(server.tcp_port)
        ids = [(await client.ok("PUSH", queue="q", data=data))["id"]
               for data in (text, maps, text, maps)]
        for job_id in ids[:2]:
            assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == job_id
            await client.ok("ACK", id=job_id, result=1)
        for job_id, data in zip(ids, (text, maps, text, maps), strict=True):
            assert (await client.ok("GetJob", id=job_id))["job"]["data"] == data
        await client.aclose()
        server.stop()
    states = ["completed", "completed", "waiting", "waiting"]
    await _read_back_after_restart(config, ids, [text, maps, text, maps], states)


async def _read_back_after_restart(config: Config, ids: list[str], datas: list[Any],
                                   states: list[str]) -> None:
    """A new broker on ``config``'s store reads each job of ``ids`` back in its state
    of ``states``, its data equal to that of ``datas``."""
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(config).run)
        client = await RawClient.connect(server.tcp_port)
        for job_id, data, state in zip(ids, datas, states, strict=True):
            job = (await client.ok("GetJob", id=job_id))["job"]
            assert (job["state"], job["data"] == data) == (state, True)
        await client.aclose()
        server.stop()


async def test_data_of_some_thousand_values_in_small_frames_round_trips(
        tmp_path: Path, store_engine: StoreEngine) -> None:
    """Data of a few thousand values in a small frame has its row encoded ahead (as on
    LMDB): a PUSH's and a PUSHB's jobs read back equal, live and finished, and after a
    restart; a PUSHB refused (a bad job) leaves no job and no encoding held."""
    config = make_config(tmp_path, store_engine)
    datas = [[i] * 2000 for i in range(3)]
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(config).run)
        client = await RawClient.connect(server.tcp_port)
        ids = [(await client.ok("PUSH", queue="q", data=datas[0]))["id"]]
        ids += (await client.ok("PUSHB", queue="q", jobs=[
            {"name": "j", "data": data} for data in datas[1:]]))["ids"]
        # their rows encoded ahead; the last job is bad, so the whole batch is refused
        refused = await client.call("PUSHB", queue="q", jobs=[
            {"name": "j", "data": [9] * 2000}, {"name": "bad", "data": {}, "priority": "x"}])
        assert refused["ok"] is False and refused["error"].startswith("jobs[1]: "), refused
        assert not server.broker.storage._encoded._ahead  # type: ignore[attr-defined]
        pulled = await client.ok("PULL", queue="q", timeout=0)
        assert pulled["job"]["data"] == datas[0]
        await client.ok("ACK", id=ids[0], result=1)
        for job_id, data in zip(ids, datas, strict=True):
            assert (await client.ok("GetJob", id=job_id))["job"]["data"] == data
        counts = (await client.ok("GetJobCounts", queue="q"))["counts"]
        assert (counts["waiting"], counts["completed"]) == (2, 1), counts
        await client.aclose()
        server.stop()
    await _read_back_after_restart(config, ids, datas, ["completed", "waiting", "waiting"])


async def test_data_of_many_values_written_by_other_commands_holds_no_long_wait(
        start_server: StartServer) -> None:
    """Data that reaches a record without a large PUSH (an Update, a job failed and
    moved back, a completed job retried) is never encoded in one call of the writer's
    thread, and its finished record reads back without a long wait."""
    server, client = await _connected(start_server)
    data = [{"a": 1}] * MANY_MAPS
    job_id = (await client.ok("PUSH", queue="q", data={}, maxAttempts=1))["id"]

    frame = client.frame({"cmd": "Update", "id": job_id, "data": data, "reqId": "u"})
    # (the frame made first: the test's own work). The core checks an Update's data's
    # types in one C call (about 16 ms for these maps): not bounded yet.
    async with _watched("Update", step_ms=UPDATE_STEP_CPU_MS):
        assert client.codec.decode(await _raw_reply(client, frame))["ok"] is True

    async def pulled(what: str) -> None:
        async with _watched(what):  # (the active record written again, with its data)
            raw = await _raw_reply(client, client.frame({"cmd": "PULL", "queue": "q",
                                                          "timeout": 0, "reqId": "l"}))
        assert client.codec.decode(raw)["job"]["id"] == job_id

    await pulled("PULL after Update")
    async with _watched("FAIL"):  # (the finished record written: failed)
        await client.ok("FAIL", id=job_id, error="no")
        await until_freed(server)
    async with _watched("GetState of the failed job"):
        assert (await client.ok("GetState", id=job_id))["state"] == "failed"
        await client.ok("GetJobCounts", queue="q")
        await until_freed(server)
    async with _watched("MoveToWait of the failed job"):  # (a live record again)
        await client.ok("MoveToWait", id=job_id)
        await client.ok("GetJobCounts", queue="q")  # (its data is the live job's now)
    await pulled("PULL after MoveToWait")
    async with _watched("ACK"):
        await client.ok("ACK", id=job_id, result=1)
    async with _watched("RetryCompleted"):
        await client.ok("RetryCompleted", queue="q")
        await client.ok("GetJobCounts", queue="q")

    got = await client.ok("GetJob", id=job_id)
    assert (got["job"]["state"], got["job"]["data"] == data) == ("waiting", True)
    await client.aclose()


async def test_an_ack_of_a_result_of_many_values_holds_no_long_wait(
        start_server: StartServer) -> None:
    server, client = await _connected(start_server)
    result = [{"a": 1}] * MANY_MAPS
    job_id = await _active_job(client)

    frame = client.frame({"cmd": "ACK", "id": job_id, "result": result, "reqId": "a"})
    async with _watched("ACK of a large result"):
        await _ok_and_freed(server, client, frame)
    async with _watched("GetResult"):
        raw = await _raw_reply(client, client.frame({"cmd": "GetResult", "id": job_id,
                                                      "reqId": "r"}))
        await client.ok("GetJobCounts", queue="q")
        await until_freed(server)
    assert client.codec.decode(raw)["result"] == result
    await client.aclose()


async def test_a_large_result_kept_for_a_parent_holds_no_long_wait(
        start_server: StartServer) -> None:
    """The child's outcome row is encoded in the writer's thread a run at a time. (Its
    GetChildrenValues, read back undecoded and decoded by the parent queue's actor,
    still has one step of the connection's task of about 28 ms here: not bounded yet.)"""
    server, client = await _connected(start_server)
    result = [{"a": 1}] * MANY_MAPS
    child = (await client.ok("PUSH", queue="q", data={}))["id"]
    parent = (await client.ok("PUSH", queue="p", data={}, dependsOn=[child]))["id"]
    assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == child
    frame = client.frame({"cmd": "ACK", "id": child, "result": result, "reqId": "a"})
    async with _watched("ACK of a child of a waiting parent"):
        await _ok_and_freed(server, client, frame)
    values = (await client.ok("GetChildrenValues", id=parent))["data"]["values"]
    assert values == {f"q:{child}": result}
    await client.aclose()


async def test_a_long_progress_message_holds_no_long_wait(
        start_server: StartServer) -> None:
    """PostgreSQL keeps the message in the job's record (no writes ahead): each write of
    the record (the progress, the finish) encodes it in the writer's thread, a string
    copied in one call, well under the bound."""
    server, client = await _connected(start_server)
    job_id = await _active_job(client)
    progress = [{"a": 1}] * MANY_MAPS
    frame = client.frame({"cmd": "Progress", "id": job_id, "progress": progress,
                          "reqId": "p"})
    async with _watched("Progress"):
        await _ok_and_freed(server, client, frame)
    async with _watched("GetProgress"):
        raw = await _raw_reply(client, client.frame({"cmd": "GetProgress", "id": job_id,
                                                      "reqId": "g"}))
    async with _watched("ACK after a long progress"):
        await client.ok("ACK", id=job_id, result=1)
    async with _watched("GetJob of the finished job"):
        job_raw = await _raw_reply(client, client.frame({"cmd": "GetJob", "id": job_id,
                                                          "reqId": "j"}))
    text = json.dumps(progress, separators=(",", ":"))
    assert client.codec.decode(raw)["message"] == text
    assert client.codec.decode(job_raw)["job"]["progressMessage"] == text
    await client.aclose()
