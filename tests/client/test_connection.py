"""The connection pool: pipelining, reconnects, auth, isolation of the embedded mode."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.client import (
    AuthenticationError,
    Connection,
    ConnectionLost,
    JobNotFound,
    Queue,
    open_connection,
)
from trioqueue.client.errors import CommandTimeout, JobExists
from trioqueue.config import Config
from trioqueue.server import Server


async def test_many_commands_in_flight_at_once(conn: Connection) -> None:
    queue = Queue("c-many", conn)
    ids: list[str] = []

    async def add(i: int) -> None:
        ids.append((await queue.add("n", i)).id)

    async with trio.open_nursery() as nursery:
        for i in range(300):
            nursery.start_soon(add, i)
    assert len(set(ids)) == 300 and await queue.count() == 300


async def test_frames_larger_than_the_socket_buffer_are_never_interleaved(
        conn: Connection) -> None:
    """Big adds (each several MB, more than a socket takes at once) and small ones, all
    in flight together on one pooled socket: a frame the socket took only in part is
    finished before any other starts, so every job arrives whole."""
    queue = Queue("c-big", conn)
    big = {i: "x" * (3_000_000 + i) for i in range(4)}
    ids: dict[int, str] = {}

    async def add(i: int) -> None:
        ids[i] = (await queue.add("n", big.get(i, i))).id

    async with trio.open_nursery() as nursery:
        for i in range(40):
            nursery.start_soon(add, i)
    for i, job_id in ids.items():
        job = await queue.get_job(job_id)
        assert job is not None and job.data == big.get(i, i)
    assert len(ids) == 40


async def test_data_is_never_shared_with_the_broker(conn: Connection) -> None:
    queue = Queue("c-copy", conn)
    data = {"items": [1, 2]}
    job = await queue.add("n", data)
    data["items"].append(3)  # the caller keeps using its object
    stored = await queue.get_job(job.id)
    assert stored is not None and stored.data == {"items": [1, 2]}
    stored.data["items"].append(99)
    again = await queue.get_job(job.id)
    assert again is not None and again.data == {"items": [1, 2]}


@pytest.mark.parametrize("codec", ["cbor", "msgpack"])
async def test_both_codecs(nursery: trio.Nursery, tmp_path: Path, codec: str) -> None:
    server: Server = await nursery.start(Server(Config(tcp_port=0, ws_port=0,
                                                       memory=True)).run)
    async with open_connection(port=server.tcp_port, codec=codec) as conn:
        queue = Queue("c-codec", conn)
        job = await queue.add("n", {"big": 2**40, "neg": -1, "f": 0.5})
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.data == {"big": 2**40, "neg": -1, "f": 0.5}
    server.stop()
    with pytest.raises(ValueError, match="codec"):
        async with open_connection(codec="json"):
            pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_restarted_broker_is_reconnected_to(tmp_path: Path) -> None:
    port = free_port()
    config = Config(tcp_port=port, ws_port=0, data_dir=str(tmp_path / "data"))
    async with trio.open_nursery() as nursery:
        first: Server = await nursery.start(Server(config).run)
        async with open_connection(port=port, pool_size=1) as conn:
            queue = Queue("c-restart", conn)
            job = await queue.add("n", 1)
            waiting = trio.Event()
            outcome: dict[str, Any] = {}

            async def long_poll() -> None:
                waiting.set()
                try:
                    await conn.call("PULL", queue="c-empty", timeout=30_000)
                except ConnectionLost as exc:
                    outcome["lost"] = exc

            nursery.start_soon(long_poll)
            await waiting.wait()
            first.stop()  # the broker goes away with a command in flight
            with trio.fail_after(10):
                while "lost" not in outcome:
                    await trio.sleep(0.01)
            second: Server = await nursery.start(Server(config).run)
            # the next command opens a new socket to the new broker
            with trio.fail_after(10):
                assert (await queue.get_job(job.id)) is not None
            second.stop()


async def test_connecting_to_nothing_fails_after_the_timeout() -> None:
    port = free_port()
    async with open_connection(port=port, connect_timeout_s=0.3) as conn:
        with trio.fail_after(5), pytest.raises(ConnectionLost, match="cannot connect"):
            await conn.call("Ping")


async def test_tokens(nursery: trio.Nursery) -> None:
    config = Config(tcp_port=0, ws_port=0, memory=True, auth_tokens=["s3cret"])
    server: Server = await nursery.start(Server(config).run)
    async with open_connection(port=server.tcp_port) as anonymous:
        with pytest.raises(AuthenticationError, match="Not authenticated"):
            await Queue("c-auth", anonymous).count()
    async with open_connection(port=server.tcp_port, token="wrong") as wrong:
        with pytest.raises(AuthenticationError, match="Invalid token"):
            await wrong.call("Ping")
    async with open_connection(port=server.tcp_port, token="s3cret") as good:
        assert await Queue("c-auth", good).count() == 0
    server.stop()
    # embedded: the broker's own token is used
    async with open_connection(embedded=True, config=Config(memory=True,
                                                            auth_tokens=["t"])) as inner:
        assert await Queue("c-auth", inner).count() == 0


async def test_embedded_broker_keeps_its_lmdb_store(tmp_path: Path) -> None:
    config = Config(data_dir=str(tmp_path / "data"))
    async with open_connection(embedded=True, config=config) as conn:
        job = await Queue("c-lmdb", conn).add("n", {"kept": True})
    async with open_connection(embedded=True, config=config) as conn:
        stored = await Queue("c-lmdb", conn).get_job(job.id)
        assert stored is not None and stored.data == {"kept": True}


async def test_a_closed_connection_refuses_commands(conn: Connection) -> None:
    await conn.aclose()
    with pytest.raises(ConnectionLost):
        await conn.call("Ping")


async def test_the_callers_exception_comes_out_unwrapped(connect_args: dict[str, Any]
                                                         ) -> None:
    with pytest.raises(JobNotFound):
        async with open_connection(**connect_args) as conn:
            await Queue("c-raise", conn).remove("missing")


async def test_a_broker_that_does_not_answer_times_out() -> None:
    """A listener that accepts and never replies: the command fails, it does not hang."""
    listener = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener[0].socket.getsockname()[1]
    accepted: list[trio.SocketStream] = []

    async def accept_and_ignore() -> None:
        accepted.append(await listener[0].accept())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept_and_ignore)
        async with open_connection(port=port, command_timeout_s=0.2) as conn:
            with trio.fail_after(5), pytest.raises(CommandTimeout, match="no reply to Ping"):
                await conn.call("Ping")
    for stream in accepted:
        await stream.aclose()
    await listener[0].aclose()


async def test_a_taken_flow_id_is_job_exists(conn: Connection) -> None:
    await Queue("c-exists", conn).add("n", {}, job_id="taken")
    with pytest.raises(JobExists):
        await conn.call("PUSHF", jobs=[{"id": "taken", "queue": "c-exists",
                                        "input": {"name": "n", "data": {}}}])
