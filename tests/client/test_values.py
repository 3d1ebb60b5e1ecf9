"""Bad input gets a clear error at once, never a hang (issue 13, item 2).

Values the wire cannot carry are refused with a ValidationError naming their path
before anything is sent; a Worker result that cannot be sent fails its job alone; a
refusal the broker cannot address to a command (it could not read the frame) is
raised at once, never left to the command timeout.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import uuid
from typing import Any

import anyio
import anyio.abc
import pytest

from trioqueue.client import (
    CommandError,
    CommandTimeout,
    Connection,
    ConnectionLost,
    Job,
    Queue,
    ValidationError,
    Worker,
    open_connection,
)
from trioqueue.client import channels as client_channels
from trioqueue.transport.wire.codec import MSGPACK
from trioqueue.transport.wire.framing import FrameDecoder, encode_frame

pytestmark = pytest.mark.anyio

QUICK_S = 2.0  # "at once": far below the 30 s command timeout


@dataclasses.dataclass
class Point:
    x: int


BAD = {
    "datetime": datetime.datetime(2026, 1, 2, 3, 4, 5),
    "Decimal": decimal.Decimal("1.50"),
    "UUID": uuid.UUID(int=7),
    "set": {1, 2},
    "Point": Point(1),
    "frozenset": frozenset({"a"}),
}


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_an_unencodable_payload_is_refused_before_sending(conn: Connection,
                                                                kind: str) -> None:
    queue = Queue("v-bad", conn)
    with anyio.fail_after(QUICK_S), pytest.raises(ValidationError) as refused:
        await queue.add("n", {"ok": 1, "when": BAD[kind]})
    assert str(refused.value).startswith(f"data.when: cannot encode {kind} ")
    assert await queue.count() == 0  # nothing reached the broker
    await queue.add("n", {"when": BAD["datetime"].isoformat()})  # the connection is fine
    assert await queue.count() == 1


async def test_the_path_names_nested_fields_and_items(conn: Connection) -> None:
    queue = Queue("v-path", conn)
    with pytest.raises(ValidationError, match=r"^data\.orders\[1\]\.ids: cannot encode set"):
        await queue.add("n", {"orders": [{"ids": [1]}, {"ids": {2, 3}}]})
    with pytest.raises(ValidationError, match=r"^jobs\[1\]\.data\.at: cannot encode date"):
        await queue.add_bulk([{"name": "a", "data": {}},
                              {"name": "b", "data": {"at": datetime.date(2026, 1, 1)}}])
    with pytest.raises(ValidationError, match=r"^data: map key 3 is not a string \(int\)"):
        await queue.add("n", {3: "three"})
    assert await queue.count() == 0
    job = await queue.add("n", {"fine": [1, "two", 3.0, None, True, b"\x00"]})
    with pytest.raises(ValidationError, match=r"^data\.x: cannot encode UUID"):
        await queue.update_job_data(job.id, {"x": uuid.uuid4()})
    with pytest.raises(ValidationError, match=r"^progress: cannot encode Decimal"):
        await queue.update_job_progress(job.id, decimal.Decimal(5))
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.data == {"fine": [1, "two", 3.0, None, True, b"\x00"]}


async def test_a_bad_result_fails_its_job_alone(conn: Connection) -> None:
    """Four jobs finish together, so their results would share one ACKB: the one whose
    result cannot be sent fails (that reason is its error), the others complete."""
    queue = Queue("v-ack", conn)
    jobs = await queue.add_bulk([{"name": "n", "data": {"n": n}, "opts": {"attempts": 1}}
                                 for n in range(4)])
    arrived = 0
    all_arrived = anyio.Event()

    async def processor(job: Job) -> Any:
        nonlocal arrived
        arrived += 1
        if arrived == 4:
            all_arrived.set()
        await all_arrived.wait()
        n = job.data["n"]
        return {"when": BAD["datetime"]} if n == 2 else {"n": n}

    worker = Worker("v-ack", processor, conn, concurrency=4, ack_batch_delay_ms=50)
    failed: list[tuple[Job, BaseException]] = []
    worker.on("failed", lambda job, exc: failed.append((job, exc)))
    async with anyio.create_task_group() as tasks:
        await tasks.start(worker.run)
        with anyio.fail_after(10):
            outcomes = [await conn.call("WaitJob", id=job.id, timeout=5000) for job in jobs]
        await worker.close()
    assert [o.get("completed", False) for o in outcomes] == [True, True, False, True]
    assert [await queue.get_result(job.id) for job in jobs[:2]] == [{"n": 0}, {"n": 1}]
    bad = await queue.get_job(jobs[2].id)
    assert bad is not None and await queue.get_job_state(bad.id) == "failed"
    assert outcomes[2]["error"].startswith("result.when: cannot encode datetime")
    assert [job.id for job, _ in failed] == [jobs[2].id]
    assert isinstance(failed[0][1], ValidationError)


async def test_a_result_spoiled_after_it_was_returned_still_fails_alone(
        conn: Connection) -> None:
    """The second line: a result that was fine when returned but holds a bad value by
    the time its ACKB is built (the processor kept a reference) fails that job only."""
    queue = Queue("v-late", conn)
    jobs = await queue.add_bulk([{"name": "n", "data": {"n": n}, "opts": {"attempts": 1}}
                                 for n in range(4)])
    results: dict[int, dict[str, Any]] = {}
    gate = anyio.Event()

    async def processor(job: Job) -> dict[str, Any]:
        n = job.data["n"]
        if n == 3:
            await gate.wait()  # while it runs, the other results wait in the batch
        results[n] = result = {"n": n}
        return result

    worker = Worker("v-late", processor, conn, concurrency=4, ack_batch_delay_ms=60_000)
    async with anyio.create_task_group() as tasks:
        await tasks.start(worker.run)
        with anyio.fail_after(10):
            while len(results) < 3:
                await anyio.sleep(0.005)
        results[1]["late"] = {1, 2}
        gate.set()  # the last processor returns: the batch of four goes out
        with anyio.fail_after(10):
            outcomes = [await conn.call("WaitJob", id=job.id, timeout=5000) for job in jobs]
        await worker.close()
    assert [o.get("completed", False) for o in outcomes] == [True, False, True, True]
    assert outcomes[1]["error"].startswith("result.late: cannot encode set")
    assert worker.processed_count == 3 and worker.failed_count == 1


# ---------------------------------------------------------------- unaddressed refusals


async def refusing_broker(stream: anyio.abc.SocketStream) -> None:
    """Answers every frame as a broker answers one it cannot read: ok false, no reqId."""
    decoder = FrameDecoder(1 << 20)
    async with stream:
        async for data in stream:
            for _payload in decoder.feed(data):
                await stream.send(encode_frame(MSGPACK.encode(
                    {"ok": False, "error": "Invalid command format"})))


async def test_an_unaddressed_refusal_is_raised_at_once_not_timed_out() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, refusing_broker)
        async with open_connection(port=port, codec="msgpack", pool_size=1,
                                   command_timeout_s=30) as conn:
            with anyio.fail_after(QUICK_S), pytest.raises(CommandError) as refused:
                await conn.call("Ping")
            assert not isinstance(refused.value, CommandTimeout)
            assert refused.value.message == "Invalid command format"
            # Two in flight: the answer cannot be told apart, so both fail at once
            # as a lost connection (the broker may have applied the other).
            lost: list[BaseException] = []

            async def ping() -> None:
                try:
                    await conn.call("Ping")
                except ConnectionLost as exc:
                    lost.append(exc)

            with anyio.fail_after(QUICK_S):
                async with anyio.create_task_group() as pings:
                    pings.start_soon(ping)
                    pings.start_soon(ping)
            assert len(lost) == 2 and not any(isinstance(e, CommandTimeout) for e in lost)
        tasks.cancel_scope.cancel()


async def test_the_real_brokers_refusal_of_an_unreadable_frame_is_raised_at_once(
        conn: Connection, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the client's own check switched off, a UUID goes out as a CBOR tag the
    broker refuses to read: the refusal comes back as an error, not a timeout."""
    if not mode.startswith("tcp"):
        pytest.skip("an embedded session is fed decoded values, not frames")
    monkeypatch.setattr(client_channels, "check_message", lambda msg: None)
    with anyio.fail_after(QUICK_S), pytest.raises(ValidationError,
                                                  match="Invalid command format"):
        await Queue("v-tag", conn).add("n", {"id": BAD["UUID"]})
