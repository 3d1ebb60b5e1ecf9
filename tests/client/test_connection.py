"""The connection pool: pipelining, reconnects, auth, isolation of the embedded mode."""

from __future__ import annotations

import socket
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

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

pytestmark = pytest.mark.anyio


async def test_many_commands_in_flight_at_once(conn: Connection) -> None:
    queue = Queue("c-many", conn)
    ids: list[str] = []

    async def add(i: int) -> None:
        ids.append((await queue.add("n", i)).id)

    async with anyio.create_task_group() as nursery:
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

    async with anyio.create_task_group() as nursery:
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
async def test_both_codecs(brokers: Any, codec: str) -> None:
    broker = await brokers.start(Config(host="127.0.0.1", tcp_port=0, ws_port=0,
                                        memory=True))
    async with open_connection(port=broker.tcp_port, codec=codec) as conn:
        queue = Queue("c-codec", conn)
        job = await queue.add("n", {"big": 2**40, "neg": -1, "f": 0.5})
        stored = await queue.get_job(job.id)
        assert stored is not None and stored.data == {"big": 2**40, "neg": -1, "f": 0.5}
    with pytest.raises(ValueError, match="codec"):
        async with open_connection(codec="json"):
            pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_restarted_broker_is_reconnected_to(tmp_path: Path, brokers: Any) -> None:
    port = free_port()
    config = Config(host="127.0.0.1", tcp_port=port, ws_port=0,
                    data_dir=str(tmp_path / "data"))
    async with anyio.create_task_group() as nursery:
        first = await brokers.start(config)
        async with open_connection(port=port, pool_size=1) as conn:
            queue = Queue("c-restart", conn)
            job = await queue.add("n", 1)
            waiting = anyio.Event()
            outcome: dict[str, Any] = {}

            async def long_poll() -> None:
                waiting.set()
                try:
                    await conn.call("PULL", queue="c-empty", timeout=30_000)
                except ConnectionLost as exc:
                    outcome["lost"] = exc

            nursery.start_soon(long_poll)
            await waiting.wait()
            await first.stop()  # the broker goes away with a command in flight
            with anyio.fail_after(10):
                while "lost" not in outcome:
                    await anyio.sleep(0.01)
            await brokers.start(config)
            # the next command opens a new socket to the new broker
            with anyio.fail_after(10):
                assert (await queue.get_job(job.id)) is not None


async def test_connecting_to_nothing_fails_after_the_timeout() -> None:
    port = free_port()
    async with open_connection(port=port, connect_timeout_s=0.3) as conn:
        with anyio.fail_after(5), pytest.raises(ConnectionLost, match="cannot connect"):
            await conn.call("Ping")


async def test_tokens(brokers: Any, anyio_backend: str) -> None:
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, memory=True,
                    auth_tokens=["s3cret"])
    server = await brokers.start(config)
    async with open_connection(port=server.tcp_port) as anonymous:
        with pytest.raises(AuthenticationError, match="Not authenticated"):
            await Queue("c-auth", anonymous).count()
    async with open_connection(port=server.tcp_port, token="wrong") as wrong:
        with pytest.raises(AuthenticationError, match="Invalid token"):
            await wrong.call("Ping")
    async with open_connection(port=server.tcp_port, token="s3cret") as good:
        assert await Queue("c-auth", good).count() == 0
    if anyio_backend != "trio":
        return
    # embedded: the broker's own token is used
    async with open_connection(embedded=True, config=Config(memory=True,
                                                            auth_tokens=["t"])) as inner:
        assert await Queue("c-auth", inner).count() == 0


async def test_embedded_mode_under_asyncio_is_refused_in_one_sentence(
        anyio_backend: str) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("embedded mode is refused under asyncio only")
    with pytest.raises(RuntimeError) as refused:
        async with open_connection(embedded=True):
            pass
    assert str(refused.value).startswith("embedded mode needs trio; under asyncio connect "
                                         "over TCP to a `trioqueue serve` broker")


async def test_embedded_broker_keeps_its_lmdb_store(tmp_path: Path, anyio_backend: str
                                                    ) -> None:
    if anyio_backend != "trio":
        pytest.skip("embedded mode needs trio")
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
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    accepted: list[anyio.abc.SocketStream] = []

    async def accept_and_ignore(stream: anyio.abc.SocketStream) -> None:
        accepted.append(stream)
        await anyio.sleep_forever()

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(listener.serve, accept_and_ignore)
        async with open_connection(port=port, command_timeout_s=0.2) as conn:
            with anyio.fail_after(5), pytest.raises(CommandTimeout, match="no reply to Ping"):
                await conn.call("Ping")
        nursery.cancel_scope.cancel()
    for stream in accepted:
        await stream.aclose()
    await listener.aclose()


async def test_a_taken_flow_id_is_job_exists(conn: Connection) -> None:
    await Queue("c-exists", conn).add("n", {}, job_id="taken")
    with pytest.raises(JobExists):
        await conn.call("PUSHF", jobs=[{"id": "taken", "queue": "c-exists",
                                        "input": {"name": "n", "data": {}}}])


async def test_a_broker_restarted_while_nothing_was_in_flight_is_reconnected_to(
        tmp_path: Path, brokers: Any) -> None:
    """The socket the broker closed while it was idle is not used again: the next
    command goes out on a new one, it does not fail."""
    port = free_port()
    config = Config(host="127.0.0.1", tcp_port=port, ws_port=0,
                    data_dir=str(tmp_path / "data"))
    first = await brokers.start(config)
    async with open_connection(port=port, pool_size=1) as conn:
        queue = Queue("c-idle", conn)
        job = await queue.add("n", 1)
        await first.stop()
        await brokers.start(config)
        with anyio.fail_after(10):
            assert (await queue.get_job(job.id)) is not None


async def test_a_cancelled_command_leaves_the_others_on_its_socket_answered(
        connect_args: dict[str, Any]) -> None:
    """Two long-polls on one socket; the first is cancelled while both wait. The
    second still gets its job when one is added (whichever of them was reading the
    socket for both), by another connection, so that the add does not read for it.
    (Embedded, a second connection would be a second broker: the add goes on the
    same one.)"""
    async with AsyncExitStack() as stack:
        conn = await stack.enter_async_context(
            open_connection(**{**connect_args, "pool_size": 1}))
        other = conn if connect_args.get("embedded") else (
            await stack.enter_async_context(open_connection(**connect_args)))
        first = anyio.CancelScope()
        got: list[Any] = []
        answered = anyio.Event()

        async def first_poll() -> None:
            with first:
                await conn.call("PULL", queue="c-never", timeout=20_000)

        async def second_poll() -> None:
            got.append((await conn.call("PULL", queue="c-second", timeout=20_000))["job"])
            answered.set()

        async with anyio.create_task_group() as nursery:
            nursery.start_soon(first_poll)
            await anyio.wait_all_tasks_blocked()
            nursery.start_soon(second_poll)
            await anyio.wait_all_tasks_blocked()
            first.cancel()
            await anyio.wait_all_tasks_blocked()
            await Queue("c-second", other).add("n", {"x": 1})
            with anyio.fail_after(10):
                await answered.wait()
        assert first.cancelled_caught and got[0]["data"] == {"x": 1}
