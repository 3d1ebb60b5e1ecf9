"""One broker owns a store (docs/durability.md, "One broker per store"): a second
``trioqueue serve`` on a store another broker serves is refused with one line naming
that broker and exit status 6, the first one serving on; a broker killed with SIGKILL
never keeps the next one out. On PostgreSQL a ``--cluster`` broker and a broker without
it never share a database either.

Each refused broker is run as a plain subprocess, so its exit status and its whole
stderr are what a supervisor would see.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from trioqueue.server.serve_exit import EXIT_LOST_OWNERSHIP, EXIT_STORE_IN_USE
from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess


def _serve_args(data_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trioqueue", "serve", "--host", "127.0.0.1",
            "--tcp-port", "0", "--ws-port", "0", "--data-dir", str(data_dir), *extra]


async def _refused(data_dir: Path, *extra: str) -> str:
    """Start a broker that must be refused: its one stderr line (after checking the
    exit status). One that starts serving instead is stopped at its ready line."""
    process = await trio.lowlevel.open_process(
        _serve_args(data_dir, *extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    err = b""
    try:
        with trio.fail_after(30):
            async for chunk in process.stderr:
                err += chunk
                assert b"trioqueue ready" not in err, f"a second broker serves:\n{err!r}"
            status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    stderr = err.decode()
    assert status == EXIT_STORE_IN_USE, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


async def _serves(broker: BrokerProcess, queue: str) -> None:
    """The broker still takes a job and hands it out."""
    client = await RawClient.connect(broker.tcp_port)
    try:
        job_id = (await client.ok("PUSH", queue=queue, name="n", data={}))["id"]
        pulled = await client.ok("PULL", queue=queue, timeout=0)
        assert pulled["job"]["id"] == job_id
        await client.ok("ACK", id=job_id)
    finally:
        await client.aclose()


def _names(line: str, broker: BrokerProcess) -> None:
    assert broker.process is not None
    assert f"pid {broker.process.pid} on host {socket.gethostname()}" in line, line
    assert "since " in line, line


# --- LMDB ------------------------------------------------------------------------------


async def test_a_second_broker_on_a_served_data_directory_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(data)
    await first.start()
    try:
        line = await _refused(data)
        assert f"store {data} is served by another broker" in line, line
        _names(line, first)
        assert "stop it first" in line, line
        await _serves(first, "after-refusal")
        assert first.process is not None and first.process.returncode is None
    finally:
        await first.stop()


async def test_a_broker_starts_on_the_directory_of_one_killed_by_sigkill(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(data)
    await first.start()
    client = await RawClient.connect(first.tcp_port)
    job_id = (await client.ok("PUSH", queue="kept", name="n", data={"n": 1}))["id"]
    await client.aclose()
    await first.kill()
    second = BrokerProcess(data)
    await second.start()  # the dead owner's lock went with it
    try:
        client = await RawClient.connect(second.tcp_port)
        assert (await client.ok("GetJob", id=job_id))["job"]["data"] == {"n": 1}
        await client.aclose()
    finally:
        await second.stop()


# --- PostgreSQL ------------------------------------------------------------------------


@pytest.fixture
def cluster_args() -> tuple[str, ...]:
    return ("--cluster", "--cluster-lease-s", "2")


async def test_a_second_single_broker_on_a_database_is_refused(tmp_path: Path,
                                                               pg_dsn: str) -> None:
    first = BrokerProcess(tmp_path / "a", storage_url=pg_dsn)
    await first.start()
    try:
        line = await _refused(tmp_path / "b", "--storage", pg_dsn)
        assert "is served by another broker" in line, line
        _names(line, first)
        assert "--cluster" in line, line
        assert "postgresql://" in line, line
        await _serves(first, "after-refusal")
    finally:
        await first.stop()


async def test_a_cluster_broker_is_refused_while_a_single_broker_serves(
        tmp_path: Path, pg_dsn: str, cluster_args: tuple[str, ...]) -> None:
    first = BrokerProcess(tmp_path / "a", storage_url=pg_dsn)
    await first.start()
    try:
        line = await _refused(tmp_path / "b", "--storage", pg_dsn, *cluster_args)
        assert "served by a broker without --cluster" in line, line
        _names(line, first)
        await _serves(first, "after-refusal")
    finally:
        await first.stop()


async def test_a_single_broker_is_refused_while_a_cluster_broker_serves(
        tmp_path: Path, pg_dsn: str, cluster_args: tuple[str, ...]) -> None:
    first = BrokerProcess(tmp_path / "a", *cluster_args, storage_url=pg_dsn)
    await first.start()
    try:
        line = await _refused(tmp_path / "b", "--storage", pg_dsn)
        assert "served by brokers with --cluster" in line, line
        _names(line, first)
        await _serves(first, "after-refusal")
    finally:
        await first.stop()


async def test_a_broker_starts_on_the_database_of_one_killed_by_sigkill(
        tmp_path: Path, pg_dsn: str) -> None:
    first = BrokerProcess(tmp_path / "a", storage_url=pg_dsn)
    await first.start()
    client = await RawClient.connect(first.tcp_port)
    job_id = (await client.ok("PUSH", queue="kept", name="n", data={"n": 1}))["id"]
    await client.aclose()
    await first.kill()
    second = BrokerProcess(tmp_path / "b", storage_url=pg_dsn)
    with trio.fail_after(10):  # (PostgreSQL ends the session as the socket closes)
        await second.start()
    try:
        client = await RawClient.connect(second.tcp_port)
        assert (await client.ok("GetJob", id=job_id))["job"]["data"] == {"n": 1}
        await client.aclose()
    finally:
        await second.stop()


def _end_writer_session(dsn: str, broker_pid: int) -> None:
    """End the database session of the broker's writer (as a restart of PostgreSQL
    would), and wait until the server has."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT session_pid FROM tq_owners WHERE pid = %s",
                           (broker_pid,)).fetchone()
        assert row is not None
        conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        for _ in range(500):
            if not conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                (row[0],)).fetchone()[0]:
                return
            time.sleep(0.01)  # (polling the server for the session's end)
        raise AssertionError("the session did not end")


async def test_a_broker_whose_store_was_taken_while_its_session_was_down_stops(
        tmp_path: Path, pg_dsn: str) -> None:
    """Its writer's session gone, another broker starts and takes the store: the first
    one's next commit finds the lock taken, commits nothing and stops (status 5)."""
    first = BrokerProcess(tmp_path / "a", storage_url=pg_dsn)
    await first.start()
    second = BrokerProcess(tmp_path / "b", storage_url=pg_dsn)
    try:
        assert first.process is not None
        await trio.to_thread.run_sync(_end_writer_session, pg_dsn, first.process.pid)
        await second.start()
        client = await RawClient.connect(first.tcp_port)
        await client.send("PUSH", queue="lost", name="n", data={})
        assert await first.wait_exit() == EXIT_LOST_OWNERSHIP
        assert b"lost the store" in first.log, first.log.decode()
        assert not [m for m in await client.drain_until_closed() if m.get("ok")]
        await client.aclose()
        await _serves(second, "taken")
    finally:
        await first.stop()
        await second.stop()
