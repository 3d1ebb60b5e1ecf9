"""A PUSH's long data written ahead (actors/ahead_writes.py): a piece at a time with
other tasks running between, within the room admission would allow, nothing left
behind when it is cut short, and rows no record took dropped once the push answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from trioqueue.actors.ahead_writes import (
    AHEAD_MIN_BYTES,
    AHEAD_MIN_VALUE_BYTES,
    ENCODE_MIN_VALUES,
    AheadWriter,
)
from trioqueue.actors.request import Request
from trioqueue.config import Config
from trioqueue.core import native
from trioqueue.server.run import Server
from trioqueue.storage.keys import encode_value
from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.memory import MemoryStorage
from trioqueue.testing import RawClient
from trioqueue.transport.wire.codec import CBOR, MSGPACK, Codec

StartServer = Callable[..., Awaitable[Server]]

# A string is written ahead from a view of its own UTF-8 bytes (utf8_views), which
# TRIOQUEUE_PURE_PYTHON turns off: a long string then takes the ordinary path.
NO_VIEW = "TRIOQUEUE_PURE_PYTHON is set: no view of a string's bytes, so no string ahead"
needs_view = pytest.mark.skipif(native.PURE_PYTHON, reason=NO_VIEW)

TEXT = "t" * (3 * AHEAD_MIN_BYTES + 7)  # 4 pieces of 1 MiB
# Data of many small values in a frame past AHEAD_MIN_VALUE_BYTES (about 0.5 MB)
MANY = [{"a": i, "b": [i, "x"]} for i in range(40_000)]


class Room:
    def __init__(self, room: int) -> None:
        self.room = room

    def storage_room(self, *, exact: bool) -> int:
        return self.room

    def admit_need(self, frame_bytes: int | None, jobs: int) -> int:
        return 2 * (frame_bytes or 0)


class Replies:
    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []

    def deliver(self, reply: dict[str, Any]) -> None:
        self.got.append(reply)


def push(text: Any = TEXT, cmd: str = "PUSH", frame_bytes: int | None = None) -> Request:
    if frame_bytes is None:
        frame_bytes = len(text) if isinstance(text, str) else 10
    return Request(cmd, {"cmd": cmd, "queue": "q", "data": text}, Replies(),
                   frame_bytes=frame_bytes)


def rows(store: MemoryStorage) -> int:
    return len(store._ahead) + len(store._claims)


def test_only_a_push_of_a_long_string_or_a_large_frame_s_data_is_written_ahead() -> None:
    writer = AheadWriter(MemoryStorage(), None, max_chars=10 * AHEAD_MIN_BYTES)
    assert writer.data_of(push()) is TEXT
    assert writer.data_of(push(cmd="ChangeData")) is None
    # an Update's data is a job's too, and has no limit
    assert writer.data_of(push(cmd="Update")) is TEXT
    longer = "o" * (10 * AHEAD_MIN_BYTES + 1)
    assert writer.data_of(push(longer, cmd="Update")) is longer
    assert writer.data_of(push("s" * (AHEAD_MIN_BYTES - 1))) is None
    assert writer.data_of(push({"t": TEXT})) is None  # (a small frame, as the test says)
    assert writer.data_of(push("o" * (10 * AHEAD_MIN_BYTES + 1))) is None  # over the limit
    many = [{"a": 1}] * 1000
    assert writer.data_of(push(many, frame_bytes=AHEAD_MIN_VALUE_BYTES)) is many
    # in a smaller frame, data of more than ENCODE_MIN_VALUES values (its row encoded
    # ahead); fewer are encoded with the record
    assert writer.data_of(push(many, frame_bytes=AHEAD_MIN_VALUE_BYTES - 1)) is many
    few = [{"a": 1}] * (ENCODE_MIN_VALUES // 2)
    assert writer.data_of(push(few, frame_bytes=AHEAD_MIN_VALUE_BYTES - 1)) is None
    assert writer.data_of(push(7, frame_bytes=AHEAD_MIN_BYTES)) is None


async def test_data_of_many_values_in_a_small_frame_has_its_row_encoded_ahead() -> None:
    store = MemoryStorage()
    writer = AheadWriter(store, None)
    data = [[i, {"k": i}] for i in range(5000)]
    request = push(data, frame_bytes=60_000)
    assert writer.data_of(request) is data
    assert await writer.write(request, data)
    assert not store._ahead  # (nothing written: the row waits for its record's commit)
    assert store._kept.ahead_for(data) == encode_value({"d": data})
    store.release_ahead(data)  # no record took it
    assert store._kept.ahead_for(data) is None and rows(store) == 0


@needs_view
async def test_pieces_are_written_with_other_tasks_running_between() -> None:
    store = MemoryStorage()
    writer = AheadWriter(store, None)
    turns = 0
    done = False

    async def other() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await trio.lowlevel.checkpoint()

    request = push()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.lowlevel.checkpoint()
        start = turns
        assert await writer.write(request, TEXT)
        done = True
    assert turns - start >= 3  # a turn of the other task after each piece but the last
    assert len(store._ahead) == 4
    store.release_ahead(TEXT)  # no record took them
    assert rows(store) == 0


@needs_view
async def test_no_room_no_write_ahead() -> None:
    store = MemoryStorage()
    request = push()
    assert not await AheadWriter(store, Room(2 * len(TEXT) - 1)).write(request, TEXT)
    assert rows(store) == 0 and isinstance(request.replier, Replies)
    assert await AheadWriter(store, Room(2 * len(TEXT))).write(push(), TEXT)


async def test_a_full_store_midway_drops_what_was_written() -> None:
    store = MemoryStorage(max_bytes=2 * AHEAD_MIN_BYTES + 100)
    request = push()
    assert not await AheadWriter(store, None).write(request, TEXT)
    assert rows(store) == 0 and store.used_bytes() == 0


@needs_view
async def test_a_write_cut_short_drops_what_was_written() -> None:
    scope = trio.CancelScope()

    class ClosingMidway(MemoryStorage):
        def write_ahead(self, row_key: bytes, index: int, piece: Any) -> None:
            super().write_ahead(row_key, index, piece)
            if index == 1:  # the connection closes while the third piece waits
                scope.cancel()

    store = ClosingMidway()
    with scope:
        await AheadWriter(store, None).write(push(), TEXT)
        pytest.fail("not cancelled")  # pragma: no cover
    assert scope.cancelled_caught
    assert rows(store) == 0 and store.used_bytes() == 0


@needs_view
async def test_the_reply_releases_what_no_record_took() -> None:
    store = MemoryStorage()
    request = push()
    replies = request.replier
    assert await AheadWriter(store, None).write(request, TEXT)
    assert rows(store) == 4
    request.error("Job already exists")  # refused: no record took the pieces
    assert rows(store) == 0
    assert isinstance(replies, Replies) and replies.got[0]["error"] == "Job already exists"


# ------------------------------------------------------------------ over a socket


def ahead_rows(server: Server) -> int:
    storage = server.broker.storage
    if isinstance(storage, MemoryStorage):
        return rows(storage)
    assert isinstance(storage, LmdbStorage)
    with storage._env.begin() as txn:
        return txn.stat(storage._ahead)["entries"] + txn.stat(storage._claims)["entries"]


async def open_client(server: Server, codec: Codec) -> RawClient:
    assert server.tcp_port is not None
    return RawClient(await trio.open_tcp_stream("127.0.0.1", server.tcp_port), codec)


@pytest.mark.parametrize("kind", ["text", "many"])
@pytest.mark.parametrize("codec", [MSGPACK, CBOR], ids=lambda c: c.name)
async def test_a_large_push_round_trips_and_leaves_no_rows(start_server: StartServer,
                                                           codec: Codec, kind: str) -> None:
    if kind == "text" and native.PURE_PYTHON:
        pytest.skip(NO_VIEW)
    server = await start_server()  # LMDB
    client = await open_client(server, codec)
    text: Any = "é😀x" * (AHEAD_MIN_BYTES // 2) if kind == "text" else MANY
    pushed = await client.ok("PUSH", queue="big", data=text, removeOnComplete=True)
    assert ahead_rows(server) > 1  # its pieces and its claim
    assert (await client.ok("GetJob", id=pushed["id"]))["job"]["data"] == text
    job = (await client.ok("PULL", queue="big", timeout=0))["job"]
    assert job["data"] == text
    await client.ok("ACK", id=job["id"])
    assert ahead_rows(server) == 0


async def test_a_refused_large_push_leaves_no_rows(start_server: StartServer) -> None:
    server = await start_server(memory=True)
    client = await open_client(server, MSGPACK)
    await client.ok("PUSH", queue="big", data=TEXT, jobId="one")
    held = ahead_rows(server)
    again = await client.call("PUSH", queue="big", data=TEXT, jobId="one")  # a duplicate
    assert again["ok"] is True and again["id"] == "one"
    bad = await client.call("PUSH", queue="big", data=TEXT, priority="high")
    assert bad["ok"] is False
    assert ahead_rows(server) == held  # the first job's rows only


@pytest.mark.parametrize("data", [pytest.param(TEXT, marks=needs_view), MANY],
                         ids=["text", "many"])
async def test_a_large_job_survives_a_restart(configure: Callable[..., Config],
                                              data: Any) -> None:
    config = configure()  # LMDB, in this test's directory
    async with trio.open_nursery() as nursery:
        first: Server = await nursery.start(Server(config).run)
        client = await open_client(first, MSGPACK)
        pushed = await client.ok("PUSH", queue="big", data=data)
        assert ahead_rows(first) > 1  # written ahead
        done = await client.ok("PUSH", queue="fin", data=data)
        await client.ok("PULL", queue="fin", timeout=0)
        await client.ok("ACK", id=done["id"], result=1)
        await client.aclose()
        first.stop()
    async with trio.open_nursery() as nursery:
        second: Server = await nursery.start(Server(config).run)
        client = await open_client(second, MSGPACK)
        job = (await client.ok("PULL", queue="big", timeout=0))["job"]
        assert job["id"] == pushed["id"] and job["data"] == data
        finished = (await client.ok("GetJob", id=done["id"]))["job"]
        assert finished["state"] == "completed" and finished["data"] == data
        await client.aclose()
        second.stop()


async def test_data_msgpack_cannot_hold_takes_the_ordinary_path(
        start_server: StartServer) -> None:
    server = await start_server()  # LMDB
    client = await open_client(server, CBOR)
    data = [1] * 200_000 + [2**70]  # (past 64 bits: stored as CBOR, never in pieces)
    pushed = await client.ok("PUSH", queue="big", data=data)
    assert ahead_rows(server) == 0
    assert (await client.ok("GetJob", id=pushed["id"]))["job"]["data"] == data
