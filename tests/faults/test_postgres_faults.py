"""Crashes on PostgreSQL: the broker killed under load, the database server restarted or
killed under load, and an outage longer than the broker waits.

The same history checker as tests/faults/test_crashes.py: no acknowledged add lost, no
completion acknowledged twice without a redelivery, every job terminal after the drain.
Needs a PostgreSQL server the tests start (the restart and crash tests stop and kill
it); skipped, saying why, without one.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.testing import RawClient
from trioqueue.testing.history import ADD, OK, History, check
from trioqueue.testing.pg_store_check import check_pg_store
from trioqueue.testing.process import BrokerProcess

from .test_crashes import QUEUE, drain_and_read, kill_cycles, start_load


async def test_kill_9_of_a_broker_on_postgres_loses_nothing_acknowledged(
        tmp_path: Path, pg_dsn: str) -> None:
    await kill_cycles(tmp_path, cycles=3, seed=11, storage_url=pg_dsn)


@pytest.mark.slow
async def test_kill_9_of_a_broker_on_postgres_twenty_times(tmp_path: Path, pg_dsn: str
                                                            ) -> None:
    await kill_cycles(tmp_path, cycles=20, seed=12, storage_url=pg_dsn)


async def _server_fault_under_load(tmp_path: Path, dsn: str, fault: Any, seed: int
                                   ) -> tuple[History, BrokerProcess]:
    """Producers and workers on a broker while ``fault`` (blocking: stop, kill or
    restart the server) runs at a random moment; the broker must ride it out."""
    rng = random.Random(seed)
    broker = BrokerProcess(tmp_path / "data", "--pg-outage-s", "60", storage_url=dsn)
    history = History()
    await broker.start()
    try:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            start_load(nursery, history, broker.tcp_port, stop, prefix="",
                       producers=3, jobs=600, window=16)
            await trio.sleep(rng.uniform(0.1, 0.4))  # (a moment under load, at random)
            await trio.to_thread.run_sync(fault)
            with trio.fail_after(60):  # the producers finish once the server is back
                while sum(1 for op in history.ops
                          if op.kind == ADD and op.status == OK) < 1800:
                    await trio.sleep(0.05)
            stop.set()
        assert broker.process is not None and broker.process.returncode is None, (
            broker.log.decode())
        final = await drain_and_read(history, broker.tcp_port)
    finally:
        await broker.stop()
    assert check_pg_store(dsn) == []
    result = check(history, final)
    result.assert_valid()
    assert result.stats["adds acknowledged"] == 1800, result.stats
    return history, broker


async def test_a_postgres_restart_under_load_loses_nothing_acknowledged(
        tmp_path: Path, restartable_postgres: Any, pg_dsn: str) -> None:
    await _server_fault_under_load(tmp_path, pg_dsn, restartable_postgres.restart, seed=21)


async def test_a_postgres_crash_under_load_loses_nothing_acknowledged(
        tmp_path: Path, restartable_postgres: Any, pg_dsn: str) -> None:
    """kill -9 of the postmaster, then crash recovery: with synchronous_commit on (the
    default) every acknowledged commit is in the WAL that recovery replays."""
    def crash_and_recover() -> None:
        restartable_postgres.kill()
        restartable_postgres.start()

    await _server_fault_under_load(tmp_path, pg_dsn, crash_and_recover, seed=22)


async def test_an_outage_past_the_limit_stops_the_broker_acknowledging_nothing(
        tmp_path: Path, restartable_postgres: Any, pg_dsn: str) -> None:
    broker = BrokerProcess(tmp_path / "data", "--pg-outage-s", "2", storage_url=pg_dsn)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        kept = (await client.ok("PUSH", queue=QUEUE, name="n", data=1))["id"]
        await trio.to_thread.run_sync(restartable_postgres.stop)
        await client.send("PUSH", queue=QUEUE, name="n", data=2)
        with trio.fail_after(30):  # no acknowledgement: the connection just ends
            with pytest.raises((EOFError, trio.BrokenResourceError, OSError)):
                await client.receive()
        assert await broker.wait_exit() == 3
        assert b"unreachable for 2 s" in broker.log, broker.log.decode()
        await client.aclose()
        await trio.to_thread.run_sync(restartable_postgres.start)
        await broker.start()  # the server is back: what was acknowledged is there
        client = await RawClient.connect(broker.tcp_port)
        assert (await client.ok("GetJob", id=kept))["job"]["data"] == 1
        await client.aclose()
    finally:
        await broker.stop()


async def test_a_broker_waits_for_a_server_that_is_starting(
        tmp_path: Path, restartable_postgres: Any, pg_dsn: str) -> None:
    """Started before its database (containers starting together), the broker waits
    for it, up to the outage limit, instead of failing."""
    await trio.to_thread.run_sync(restartable_postgres.stop)
    broker = BrokerProcess(tmp_path / "data", "--pg-outage-s", "60", storage_url=pg_dsn)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.start)
        with trio.fail_after(30):  # the broker says it waits
            while b"PostgreSQL unreachable" not in broker.log:
                await trio.sleep(0.02)
        await trio.to_thread.run_sync(restartable_postgres.start)
    try:
        client = await RawClient.connect(broker.tcp_port)
        assert (await client.ok("PUSH", queue=QUEUE, name="n", data=1))["id"]
        await client.aclose()
    finally:
        await broker.stop()


def test_a_broker_refused_by_the_server_exits_with_one_line(tmp_path: Path, pg_dsn: str
                                                             ) -> None:
    import subprocess
    import sys

    missing = pg_dsn.rsplit("/", 1)[0] + "/no_such_database"
    done = subprocess.run(
        [sys.executable, "-m", "trioqueue", "serve", "--tcp-port", "0", "--ws-port", "0",
         "--storage", missing], capture_output=True, text=True, timeout=60)
    assert done.returncode == 4
    assert done.stderr.startswith("error: cannot open the PostgreSQL store: ")
    assert 'database "no_such_database" does not exist' in done.stderr
    assert "Traceback" not in done.stderr
