"""A store's one owner, at the store's level (the broker's view: tests/e2e/
test_store_owner.py): LMDB's lock on its directory; PostgreSQL's owner lock on the
writer's session, taken again when that session is lost, or the store given up.

The PostgreSQL tests need a server (``pg_dsn``); skipped with the reason without one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.port import Fenced, StoreInUse

from .test_storage import apply, put, rec

# --- LMDB ------------------------------------------------------------------------------


def test_an_lmdb_directory_has_one_store_open_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "db"
    first = LmdbStorage(path, map_size_bytes=1 << 20)
    apply(first, put(rec("a")))
    with pytest.raises(StoreInUse, match=(f"the store {path} is served by another broker "
                                          fr"\(pid {os.getpid()} on host "
                                          fr"{socket.gethostname()}, since 20")):
        LmdbStorage(path, map_size_bytes=1 << 20)
    apply(first, put(rec("b")))  # the first one is untouched
    first.close()
    again = LmdbStorage(path, map_size_bytes=1 << 20)  # closed: free again
    assert sorted(j["id"] for j in again.load().live_jobs) == ["a", "b"]
    again.close()


# --- PostgreSQL -------------------------------------------------------------------------

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL storage needs psycopg: "
                                                "pip install -e '.[test]'")

from trioqueue.storage.pg import owner as pg_owner  # noqa: E402
from trioqueue.storage.pg.connection import redact  # noqa: E402
from trioqueue.storage.pg.owner import PgOwner, StoreLost  # noqa: E402
from trioqueue.storage.pg.store import PgStorage  # noqa: E402


def _owned(dsn: str, *, cluster: bool = False, wait_s: float = 5.0) -> PgStorage:
    owner = PgOwner(redact(dsn), cluster=cluster, wait_s=wait_s)
    fence = _NoLeases() if cluster else None
    return PgStorage(dsn, outage_s=5, owner=owner, fence=fence)


class _NoLeases:
    broker_id = "test"

    def epoch(self, queue: str) -> int | None:
        return None


def _writer_session(store: PgStorage) -> int:
    conn = store._link.writer()
    return int(conn.info.backend_pid)


def _end_session(dsn: str, session_pid: int) -> None:
    """End one session from outside, as a restart of the server would (and wait until
    the server has: its locks go with it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (session_pid,))
        deadline = time.monotonic() + 5
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                           (session_pid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the session did not end"
            time.sleep(0.01)  # (polling the server for the session's end)


def _live_ids(dsn: str) -> list[bytes]:
    with psycopg.connect(dsn) as conn:
        return sorted(bytes(r[0]) for r in conn.execute("SELECT id FROM tq_live").fetchall())


@pytest.fixture
def first(pg_dsn: str) -> Iterator[PgStorage]:
    store = _owned(pg_dsn)
    yield store
    store.close()


def test_a_second_owner_is_refused_until_the_first_closes(first: PgStorage,
                                                          pg_dsn: str) -> None:
    with pytest.raises(StoreInUse, match=fr"pid {os.getpid()} on host "):
        _owned(pg_dsn)
    with pytest.raises(StoreInUse, match="served by a broker without --cluster"):
        _owned(pg_dsn, cluster=True)
    first.close()
    with closing(_owned(pg_dsn, cluster=True)), closing(_owned(pg_dsn, cluster=True)):
        with pytest.raises(StoreInUse, match="served by brokers with --cluster "
                                             r"\(.*, and 1 more\)"):
            _owned(pg_dsn)
    with closing(_owned(pg_dsn)):  # every one gone: free again
        pass


def test_a_lost_writer_session_takes_the_lock_again(first: PgStorage, pg_dsn: str) -> None:
    session = _writer_session(first)
    _end_session(pg_dsn, session)
    apply(first, put(rec("a")))  # committed on a new session, which holds the lock
    assert _writer_session(first) != session
    with pytest.raises(StoreInUse):
        _owned(pg_dsn)


def test_a_store_taken_meanwhile_is_given_up_committing_nothing(first: PgStorage,
                                                                 pg_dsn: str) -> None:
    apply(first, put(rec("a")))
    _end_session(pg_dsn, _writer_session(first))
    with closing(_owned(pg_dsn)) as second:  # the lock was free: it is second's now
        with pytest.raises(StoreLost, match="lost the store .* to another broker "
                                            fr"\(pid {os.getpid()} on host") as lost:
            apply(first, put(rec("b")))
        assert isinstance(lost.value, Fenced)  # the broker stops: exit status 5
        apply(second, put(rec("c")))
    assert _live_ids(pg_dsn) == [b"a", b"c"]


def test_its_own_earlier_session_is_ended(first: PgStorage, pg_dsn: str) -> None:
    """A writer's connection lost on this side only: the server still holds the old
    session's lock, which must not keep the broker out of its own store."""
    old = _writer_session(first)
    owner = first._link.owner
    assert owner is not None
    with closing(first._link.connect()) as conn:
        conn.autocommit = True
        owner.take(conn)
        assert conn.info.backend_pid != old
    assert first._link._writer is not None
    with pytest.raises(psycopg.OperationalError):
        first._link._writer.execute("SELECT 1")


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, check=True, text=True)
    return int(done.stdout)


def _hold_as(dsn: str, pid: int, host: str) -> Any:
    """A session holding the lock exclusive, recorded as broker ``pid`` on ``host``."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SELECT pg_advisory_lock(%s)", (pg_owner.L.OWNER_LOCK_KEY,))
    conn.execute("INSERT INTO tq_owners VALUES (pg_backend_pid(), 'single', %s, %s, now())",
                 (pid, host))
    return conn


def test_a_dead_broker_of_this_host_is_waited_for(pg_dsn: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Its session outlives it a moment (the server has not read the socket's end yet):
    the next broker asks again until it is gone, and only for such a holder."""
    PgStorage(pg_dsn, outage_s=5).close()  # (the schema)
    holder = _hold_as(pg_dsn, _dead_pid(), socket.gethostname())
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 2:
            holder.close()  # the server ends the session

    monkeypatch.setattr(pg_owner, "_pause", pause)
    with closing(_owned(pg_dsn)):
        assert len(pauses) >= 2
    pauses.clear()
    alive = _hold_as(pg_dsn, _dead_pid(), "another-host")  # (we cannot tell: alive)
    try:
        with pytest.raises(StoreInUse, match="on host another-host"):
            _owned(pg_dsn, wait_s=30)
        assert pauses == []
    finally:
        alive.close()
