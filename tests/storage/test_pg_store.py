"""The PostgreSQL store: what it shares with the other stores (random operation sequences
against the reference model), and what is its own: a batch applied twice, a reopen,
migrations, the batch look-up of finished ids, a refused connection.

Needs a PostgreSQL server (``pg_dsn``: started from the installed binaries, or
``TRIOQUEUE_TEST_POSTGRES``); skipped with the reason without one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL storage needs psycopg: "
                                                "pip install -e '.[test]'")

from trioqueue.storage.pg import layout as L  # noqa: E402
from trioqueue.storage.pg.schema import SchemaTooNew, migrate, schema_version  # noqa: E402
from trioqueue.storage.pg.store import PgStorage  # noqa: E402
from trioqueue.storage.port import StorageUnavailable  # noqa: E402

from .test_storage import (  # noqa: E402
    Model,
    _observe,
    applies,
    apply,
    delete,
    dep,
    finish,
    ids,
    meta,
    put,
    rec,
    writes,
)

TABLES = ("tq_live", "tq_finished", "tq_finished_counts", "tq_dep_outcomes",
          "tq_queue_meta", "tq_broker_records")
ALL_TABLES = {*TABLES, "tq_wal_flushes", "tq_brokers", "tq_queue_leases", "tq_inbox",
              "tq_waits", "tq_record_versions", "tq_id_claims",
              "tq_owners"}


@pytest.fixture
def pg(pg_dsn: str) -> Iterator[PgStorage]:
    store = PgStorage(pg_dsn, outage_s=5)
    yield store
    store.close()


def _truncate(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)}")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(calls_per_apply=applies)
def test_postgres_matches_the_model(pg_dsn: str,
                                    calls_per_apply: list[list[list[tuple[Any, ...]]]]
                                    ) -> None:
    # one database for every example: the store opened afresh (it migrates a new
    # database), then emptied before it reads anything
    store = PgStorage(pg_dsn, outage_s=5)
    _truncate(pg_dsn)
    model = Model()
    try:
        for batches in calls_per_apply:
            store.apply([writes(*calls) for calls in batches])
            model.apply([c for calls in batches for c in calls])
            assert _observe(store) == _observe(model)
    finally:
        store.close()
    reopened = PgStorage(pg_dsn, outage_s=5)
    try:  # a restart reads back exactly what was committed
        assert _observe(reopened) == _observe(model)
    finally:
        reopened.close()


def test_a_batch_applied_twice_leaves_what_once_does(pg: PgStorage, pg_dsn: str) -> None:
    """A connection lost during a commit hides whether it happened: the store applies
    the batch again, which must not count finished jobs twice."""
    apply(pg, put(rec("a")), finish(rec("b", state="completed", created=1), "r"))
    batch = [writes(finish(rec("a", state="failed", created=2)),
                    finish(rec("b", state="failed", created=1)), delete("c"),
                    dep("a", "b", {"ok": 1}), meta("q", {"paused": True}))]
    pg.apply(batch)
    once = _observe_all(pg)
    pg.apply(batch)
    assert _observe_all(pg) == once
    assert pg.count_finished("q", "failed") == 2
    assert pg.count_finished("q", "completed") == 0
    with closing(PgStorage(pg_dsn, outage_s=5)) as again:
        assert again.load().finished_counts == {("q", "failed"): 2}


def _observe_all(store: PgStorage) -> Any:
    return (store.load(), store.list_finished("q", "failed", asc=True, offset=0, limit=10),
            store.get_result("b"), store.dep_outcomes("a"))


def test_a_reopened_store_has_every_commit(pg: PgStorage, pg_dsn: str) -> None:
    apply(pg, *(put(rec(f"live{i}", data={"i": i})) for i in range(3)),
          *(finish(rec(f"done{i}", state="completed", created=i), i) for i in range(5)),
          meta("q", {"paused": True}), dep("live0", "done1", {"r": 1}))
    pg.apply([writes(("put_broker_record", "cron", "nightly", {"every": 5}))])
    pg.close()
    with closing(PgStorage(pg_dsn, outage_s=5)) as again:
        recovered = again.load()
        assert ids(recovered.live_jobs) == ["live0", "live1", "live2"]
        assert recovered.queue_meta == {"q": {"paused": True}}
        assert recovered.finished_counts == {("q", "completed"): 5}
        assert recovered.broker_records == {"cron": {"nightly": {"every": 5}}}
        assert again.count_finished("q", "completed") == 5
        assert again.get_result("done3") == (True, 3)
        assert again.dep_outcomes("live0") == {"done1": {"r": 1}}


def test_finished_ids_are_looked_up_in_one_call(pg: PgStorage) -> None:
    apply(pg, finish(rec("a", queue="mail", state="completed")),
          finish(rec("b", queue="sms", state="failed")), put(rec("live")))
    assert pg.queues_of_finished(["a", "b", "live", "nope", "x" * 600]) == {
        "a": "mail", "b": "sms"}


def test_sync_flushes_even_with_asynchronous_commits(pg_dsn: str) -> None:
    """With synchronous_commit off a commit returns before its WAL is on disk; sync()
    (what --fsync always, the interval flush and a durable job wait for) returns only
    once it is."""
    store = PgStorage(pg_dsn + "?options=-csynchronous_commit%3Doff", outage_s=5)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            apply(store, put(rec("a", data="x" * 20_000)))
            written = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
            store.sync()
            flushed = conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn",
                                   written).fetchone()
        assert flushed == (True,)
    finally:
        store.close()


def test_batches_reach_rows_by_key_even_when_planned_on_empty_tables(pg_dsn: str) -> None:
    """The server plans the batch statement again after VACUUM and keeps that plan. Made
    while the tables had no pages, it used to read all of tq_live and tq_finished for
    each batch once they had grown: ten times slower, found in the benchmarks. The rows a
    user's batches write must be found by key whatever the tables held at planning."""
    store = PgStorage(pg_dsn, outage_s=5)
    try:
        for i in range(8):  # the statement is prepared (psycopg: after five runs)
            apply(store, put(rec(f"warm{i}")))
            apply(store, delete(f"warm{i}"))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            # empty tables truncated to no pages; their new statistics make the server
            # plan the statement again at its next run
            conn.execute("VACUUM ANALYZE tq_live, tq_finished")
            conn.execute("SELECT pg_stat_reset()")
        for b in range(5):
            apply(store, *(put(rec(f"j{b}.{i}")) for i in range(200)))
        for b in range(5):
            apply(store, *(finish(rec(f"j{b}.{i}", state="completed"), i) for i in range(200)))
        assert store.count_finished("q", "completed") == 1000
    finally:
        store.close()  # the broker's sessions end, which reports their statistics
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 20
        while True:
            rows = {name: (deleted, read) for name, deleted, read in conn.execute(
                "SELECT relname, n_tup_del, seq_tup_read FROM pg_stat_user_tables"
                " WHERE relname IN ('tq_live', 'tq_finished')").fetchall()}
            if rows["tq_live"][0] >= 1000 or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # polling the statistics view for the sessions' report
    assert rows["tq_live"][0] >= 1000, "the sessions' statistics never arrived"
    assert {name: read for name, (_, read) in rows.items()} == {
        "tq_live": 0, "tq_finished": 0}


# --- migrations ------------------------------------------------------------------------


def test_a_fresh_database_is_migrated_once(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        assert schema_version(conn) == 0
        assert migrate(conn) == [m.version for m in L.MIGRATIONS]
        assert migrate(conn) == []
        assert schema_version(conn) == L.LATEST_VERSION
        names = {row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'tq%'").fetchall()}
    assert names == {*ALL_TABLES, L.VERSION_TABLE}


def test_brokers_starting_together_migrate_once(pg_dsn: str) -> None:
    """The advisory lock makes the second wait and then find nothing to do."""
    applied: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(pg_dsn) as conn:
                applied.append(migrate(conn))
        except BaseException as exc:  # (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert sorted(applied) == [[], [], [], [m.version for m in L.MIGRATIONS]]


def test_a_schema_newer_than_this_trioqueue_is_refused(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        migrate(conn)
        conn.execute(L.RECORD_VERSION, (L.LATEST_VERSION + 1, "from the future"))
        conn.commit()
    with pytest.raises(SchemaTooNew, match="upgrade trioqueue"):
        PgStorage(pg_dsn, outage_s=5)


def test_a_refused_connection_fails_at_once(pg_dsn: str) -> None:
    missing = pg_dsn.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(StorageUnavailable, match="refused the connection"):
        PgStorage(missing, outage_s=30)  # not 30 s of retries: the server said no
