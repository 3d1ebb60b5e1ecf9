"""Connections to PostgreSQL, and what the store does while the server is away.

:class:`PgLink` owns the writer's connection (used only from the storage writer's worker
thread, one batch at a time) and a small pool for reads (the queues' reads run in worker
threads, several at once). psycopg 3's synchronous API is the one used: its async API is
asyncio-only, and each call here runs in a worker thread, off the trio thread.

**An outage.** A call that fails because the server went away (``OperationalError``:
the connection dropped, the server is restarting or refusing connections) is retried
on a fresh connection, with a backoff, until ``outage_s`` has passed since the first
failure; then :class:`StorageUnavailable` is raised and the broker stops with that
line. Meanwhile the writer's batch waits in its worker thread, so nothing is
acknowledged that was not committed; the batch is then applied again whole, which is
safe even when the lost connection had committed it (every statement of a batch sets
rows to their final values: :mod:`.layout`). Any other database error is a bug, not
an outage, and stops the broker at once; so does :class:`~..port.Fenced` (a cluster's
broker that lost a queue's lease), which is raised at once, never retried.

**The owner lock.** A broker's writer session holds the store's owner lock
(:mod:`.owner`): each writer's session is opened with it taken, so after an outage
the lock is taken again before the batch is written again; refused then (another
broker took the store meanwhile), the broker stops, committing nothing more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ..port import Fenced, StorageUnavailable
from . import layout as L
from .owner import PgOwner

log = logging.getLogger("trioqueue.storage.pg")

T = TypeVar("T")

READ_POOL_MAX = 4  # reads in flight at once; more wait for a connection
_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 1.0


def connect_kwargs(outage_s: float) -> dict[str, Any]:
    """Connection options: no statement is prepared by hand (psycopg prepares those it
    sees five times), and a dead peer is noticed by TCP keepalives and a bound on
    unacknowledged sends rather than after the kernel's minutes of retries."""
    return {
        "application_name": "trioqueue",
        "connect_timeout": max(1, min(10, int(outage_s))),
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": int(max(1.0, outage_s) * 1000),
    }


def redact(dsn: str) -> str:
    """The DSN without its password, for logs and StorageStatus."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable)"
    user = info.get("user", "")
    host = info.get("host", "localhost")
    port = f":{info['port']}" if info.get("port") else ""
    who = f"{user}@" if user else ""
    return f"postgresql://{who}{host}{port}/{info.get('dbname', '')}"


class PgLink:
    """The writer's connection and the readers' pool, with the outage rule above."""

    def __init__(self, dsn: str, *, outage_s: float, owner: PgOwner | None = None) -> None:
        self.dsn = dsn
        self.outage_s = outage_s
        # A broker's hold on the store, taken by every writer's session it opens (so a
        # batch only ever commits on a session that holds it); None for tools.
        self.owner = owner
        self._kwargs = connect_kwargs(outage_s)
        self._writer: psycopg.Connection[Any] | None = None
        self._writer_lock = threading.Lock()  # one user at a time (the writer thread)
        self._pool: ConnectionPool[Any] | None = None
        self._closed = False
        self._down_since: float | None = None  # monotonic time of the first failure
        # Whether each commit waits for its WAL flush (synchronous_commit is not off
        # for the writer's session); known once the writer has connected.
        self.commits_flushed = False

    # --- connections ----------------------------------------------------------------

    def connect(self) -> psycopg.Connection[Any]:
        """A fresh connection (for migrations and the writer); raises on failure."""
        return psycopg.connect(self.dsn, **self._kwargs)

    def writer(self) -> psycopg.Connection[Any]:
        """The writer's connection, in autocommit: a batch is one statement, which is
        its own transaction (no BEGIN and COMMIT round trips)."""
        conn = self._writer
        if conn is None or conn.closed:
            conn = self.connect()
            try:
                self._set_up_writer(conn)
            except BaseException:
                conn.close()  # (no batch may commit on a session without the lock)
                raise
            self._writer = conn
        return conn

    def _set_up_writer(self, conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True
        # The batch statement is prepared, and its plan does not depend on how
        # many rows a batch has (index look-ups per row): one generic plan saves
        # planning a statement of a dozen parts each time (0.3 ms here).
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(L.KEYED_SESSION)
        setting = conn.execute("SHOW synchronous_commit").fetchone()
        self.commits_flushed = setting is not None and setting[0] != "off"
        if self.owner is not None:
            self.owner.take(conn)

    def _reads(self) -> ConnectionPool[Any]:
        pool = self._pool
        if pool is None:
            pool = self._pool = ConnectionPool(
                self.dsn, min_size=1, max_size=READ_POOL_MAX, open=True,
                kwargs={"autocommit": True, **self._kwargs},
                timeout=max(self.outage_s, 1.0), name="trioqueue-reads",
                configure=_keyed_session)
        return pool

    # --- calls with the outage rule -------------------------------------------------

    def write(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``work`` on the writer's connection (it opens and commits its own
        transaction), retrying through an outage."""
        with self._writer_lock:
            return self._retrying(lambda: work(self.writer()), self._drop_writer)

    def read(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``work`` on a pooled autocommit connection, retrying through an outage."""
        def attempt() -> T:
            with self._reads().connection() as conn:
                return work(conn)
        return self._retrying(attempt, lambda: None)

    def _retrying(self, attempt: Callable[[], T], drop: Callable[[], None]) -> T:
        delay = _BACKOFF_FIRST_S
        while True:
            if self._closed:
                raise StorageUnavailable("storage is closed")
            try:
                result = attempt()
            except Fenced:  # another broker owns a queue now: waiting cannot mend that
                raise
            except psycopg.OperationalError as exc:
                drop()
                if refused(exc):
                    raise StorageUnavailable(
                        f"PostgreSQL at {redact(self.dsn)} refused the connection: "
                        f"{_first_line(exc)}") from exc
                self._note_down(exc)
                time.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)
                continue
            except PoolTimeout as exc:  # (no connection within outage_s)
                self._note_down(exc)
                continue
            if self._down_since is not None:
                log.warning("PostgreSQL is back after %.1f s: committing again",
                            time.monotonic() - self._down_since)
                self._down_since = None
            return result

    def _note_down(self, exc: Exception) -> None:
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
            log.error("PostgreSQL unreachable (%s): holding every acknowledgement, "
                      "retrying for up to %g s", _first_line(exc), self.outage_s)
        elif now - self._down_since >= self.outage_s:
            raise StorageUnavailable(
                f"PostgreSQL at {redact(self.dsn)} unreachable for {self.outage_s:g} s "
                f"({_first_line(exc)}): stopping; every acknowledged write is committed"
            ) from exc

    def _drop_writer(self) -> None:
        conn, self._writer = self._writer, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # (a broken connection may fail to close cleanly)
                log.debug("closing a broken connection failed", exc_info=True)

    def close(self) -> None:
        self._closed = True
        with self._writer_lock:
            self._drop_writer()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()


# What a server says while it is starting, stopping or full: worth waiting for.
_PASSING = ("starting up", "shutting down", "recovery mode", "too many clients",
            "not yet accepting", "terminating connection")


def _keyed_session(conn: psycopg.Connection[Any]) -> None:
    """A pooled reader's session setup (layout.KEYED_SESSION says why)."""
    conn.execute(L.KEYED_SESSION)


def refused(exc: psycopg.OperationalError) -> bool:
    """A connection a running server turned down for good (a wrong password, a missing
    database or role): no point waiting out an outage for it. psycopg gives such
    failures no SQLSTATE, so the server's FATAL line is what tells."""
    text = str(exc)
    return "FATAL:" in text and not any(passing in text for passing in _PASSING)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
