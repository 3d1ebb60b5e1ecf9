"""The owner lock of a PostgreSQL store: one broker per database, or a cluster.

Brokers started on one database without ``--cluster`` each rebuild every queue from
it and then commit from what they hold in memory, overwriting and deleting each
other's jobs, so acknowledged work is lost. So a broker holds a session-level advisory
lock (:data:`.layout.OWNER_LOCK_KEY`) for its life: exclusive without
``--cluster``, shared with it. A single broker then keeps every other broker out, and a
cluster's brokers keep a single one out but not each other. The server drops the lock
with the session, so a broker killed by SIGKILL (its socket closed by the kernel) never
keeps the next one out; a broker whose host vanished is noticed by TCP keepalives that
the lock's session asks the server for (:data:`.layout.OWNER_KEEPALIVES`).

**The lock is held by the writer's session**, the one every commit goes through
(:class:`.connection.PgLink`), and taken again whenever that session is opened
again (after an outage, a restart of PostgreSQL): so a batch can only ever commit on a
session that holds the lock, and there is never a moment with two owners writing. If
another broker took the store while the connection was down, the lock is not granted
again, nothing more is committed, and the broker stops (:class:`StoreLost`, exit
status 5), as a cluster's broker fenced off a queue does.

Each holder writes a row of ``tq_owners`` (pid, host, since when, mode), believed only
while its session holds the lock, so a refused broker can name who holds it.

Waiting: a refusal is final at once, except where the holder is known to be going: a
broker of this host whose process no longer exists (the server has not yet seen its
socket close), or this broker's own earlier session, which the server has not yet
noticed is gone (it is ended: nothing else uses it). For those the lock is asked for
again, for up to ``wait_s``.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime
from typing import Any, NamedTuple

import psycopg

from ..owners import owner_words, since_words
from ..port import Fenced, StoreInUse
from . import layout as L

_EXCLUSIVE = "ExclusiveLock"  # pg_locks' mode of a broker without --cluster
_RETRY_FIRST_S = 0.02
_RETRY_MAX_S = 0.5


class StoreLost(Fenced):
    """The writer's session was lost, and by the time it came back another broker held
    the store: nothing more may be committed (never retried; exit status 5)."""


class Holder(NamedTuple):
    """A session holding the lock: its mode, and the broker it recorded (None until it
    has)."""

    mode: str
    pid: int | None
    host: str | None
    since: datetime | None
    session_pid: int

    @property
    def exclusive(self) -> bool:
        return self.mode == _EXCLUSIVE

    def words(self) -> str:
        since = None if self.since is None else since_words(self.since)
        return owner_words(self.pid, self.host, since)


class PgOwner:
    """This broker's hold on the store at ``location`` (the URL without its password,
    for messages). ``cluster``: shared, beside other cluster brokers; else exclusive."""

    def __init__(self, location: str, *, cluster: bool, wait_s: float) -> None:
        self.location = location
        self.cluster = cluster
        self.wait_s = wait_s
        self.mode = "cluster" if cluster else "single"
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.since = datetime.now(UTC)
        self._sessions: set[int] = set()  # the database sessions that held it for us

    @property
    def held(self) -> bool:
        """Whether this broker has held the lock (a refusal then means it was lost)."""
        return bool(self._sessions)

    def take(self, conn: psycopg.Connection[Any]) -> None:
        """Take the lock on ``conn``, a fresh autocommit session (the writer's), and
        record this broker in it. Raises :class:`~..port.StoreInUse` when another
        broker holds the store, or :class:`StoreLost` if this broker had held it."""
        conn.execute(L.OWNER_KEEPALIVES)
        ask = L.TAKE_OWNER_LOCK_SHARED if self.cluster else L.TAKE_OWNER_LOCK
        deadline = time.monotonic() + self.wait_s
        delay = _RETRY_FIRST_S
        while True:
            row = conn.execute(ask, (L.OWNER_LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                break
            blocking = [h for h in holders(conn) if h.exclusive or not self.cluster]
            if not self._going(conn, blocking) or time.monotonic() >= deadline:
                raise self._refusal(blocking)
            _pause(delay)
            delay = min(delay * 2, _RETRY_MAX_S)
        self._sessions.add(conn.info.backend_pid)
        self.record(conn)

    def record(self, conn: psycopg.Connection[Any]) -> None:
        """Write this broker's row for the session ``conn`` (which holds the lock);
        nothing before the schema has the table (the broker records again once it has
        migrated)."""
        row = conn.execute(L.HAS_OWNER_TABLE).fetchone()
        if row is None or not row[0]:
            return
        conn.execute(L.RECORD_OWNER, {**_key_parts(), "mode": self.mode, "pid": self.pid,
                                      "host": self.host, "since": self.since})

    def _going(self, conn: psycopg.Connection[Any], blocking: list[Holder]) -> bool:
        """Whether every holder in the way is on its way out (see the module): our own
        earlier sessions are ended here. True when none is left (worth asking again)."""
        for holder in blocking:
            if self._ours(holder):
                conn.execute(L.END_SESSION, (holder.session_pid,))
            elif not (holder.host == self.host and holder.pid is not None
                      and not _alive(holder.pid)):
                return False
        return True

    def _ours(self, holder: Holder) -> bool:
        return (holder.session_pid in self._sessions and holder.pid == self.pid
                and holder.host == self.host and holder.since == self.since)

    def _refusal(self, blocking: list[Holder]) -> Exception:
        where = f"the store {self.location}"
        who = _list(blocking)
        if self.held:
            return StoreLost(f"lost {where} to another broker ({who}) while its connection "
                             f"was down: it commits nothing more")
        if self.cluster:
            return StoreInUse(
                f"{where} is served by a broker without --cluster ({who}); a cluster's "
                f"broker cannot share it: stop that broker first, then run every broker "
                f"with --cluster")
        if blocking and not any(h.exclusive for h in blocking):
            return StoreInUse(
                f"{where} is served by brokers with --cluster ({who}); a broker without "
                f"--cluster cannot share it: start this one with --cluster")
        return StoreInUse(f"{where} is served by another broker ({who}); stop it first, "
                          f"or run every broker with --cluster")


def holders(conn: psycopg.Connection[Any]) -> list[Holder]:
    """The sessions holding the owner lock, oldest first, with their brokers."""
    row = conn.execute(L.HAS_OWNER_TABLE).fetchone()
    query = L.OWNERS if row is not None and row[0] else L.OWNERS_UNRECORDED
    return [Holder(*found) for found in conn.execute(query, _key_parts()).fetchall()]


def _key_parts() -> dict[str, int]:
    """The lock key as pg_locks shows it (classid, objid)."""
    return {"high": L.OWNER_LOCK_KEY >> 32, "low": L.OWNER_LOCK_KEY & 0xFFFFFFFF}


def _list(found: list[Holder]) -> str:
    if not found:  # (it went between our try and our look)
        return "gone since: try again"
    more = f", and {len(found) - 1} more" if len(found) > 1 else ""
    return found[0].words() + more


def _pause(seconds: float) -> None:
    """Wait before asking for the lock again (in the writer's thread)."""
    time.sleep(seconds)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one we may not signal does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
