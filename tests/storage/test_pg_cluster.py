"""A cluster's storage: membership, queue leases and fenced commits on PostgreSQL
(cluster/pg.py, tq_fence), and the same operations in memory
(cluster/memory.py), held to the same rules by the same tests.

The PostgreSQL tests need a server (``pg_dsn``); skipped with the reason without one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="PostgreSQL storage needs psycopg: "
                                                "pip install -e '.[test]'")

from trioqueue.cluster.memory import MemoryCluster  # noqa: E402
from trioqueue.cluster.pg import PgCluster, tables_of  # noqa: E402
from trioqueue.core.writes import Writes  # noqa: E402
from trioqueue.storage import keys as K  # noqa: E402
from trioqueue.storage.memory import MemoryStorage  # noqa: E402
from trioqueue.storage.pg import layout as L  # noqa: E402
from trioqueue.storage.pg.schema import migrate, schema_version  # noqa: E402
from trioqueue.storage.pg.store import PgStorage  # noqa: E402
from trioqueue.storage.port import (  # noqa: E402
    FINISHED,
    LIVE,
    OURS,
    THEIRS,
    Claimed,
    Fenced,
    Storage,
)

from .test_storage import finish, meta, put, rec  # noqa: E402

LEASE_S = 5.0


def queue_writes(queue: str | None, *calls: tuple[Any, ...]) -> Writes:
    w = Writes(queue)
    for name, *args in calls:
        getattr(w, name)(*args)
    return w


@dataclass
class Held:
    """A Fence: the leases a test says its broker holds."""

    broker_id: str
    epochs: dict[str, int]

    def epoch(self, queue: str) -> int | None:
        return self.epochs.get(queue)


# --- both implementations ---------------------------------------------------------------


@dataclass
class Setup:
    cluster: PgCluster | MemoryCluster
    store: Storage  # the jobs load_queues and queues_of read
    age: Callable[[str], None]  # makes a broker's heartbeat older than the lease


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "postgres"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    if request.param == "memory":
        store = MemoryStorage()
        memory = MemoryCluster(Clock(), store=store)

        def age_member(broker_id: str) -> None:
            memory.brokers[broker_id].heartbeat -= 2 * LEASE_S

        yield Setup(memory, store, age_member)
        return
    dsn = request.getfixturevalue("pg_dsn")
    with closing(PgStorage(dsn, outage_s=5)) as pg:
        yield Setup(tables_of(pg), pg, lambda broker_id: _age(dsn, broker_id))


def _age(dsn: str, broker_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE tq_brokers SET heartbeat = now() - interval '1 hour'"
                     " WHERE id = %s", (broker_id,))


def test_brokers_see_each_other_until_one_goes_stale(setup: Setup) -> None:
    c = setup.cluster
    c.join("a", "10.0.0.1:6789")
    c.join("b", "10.0.0.2:6789")
    beat = c.beat("a", LEASE_S)
    assert beat is not None
    assert beat.live == {"a": "10.0.0.1:6789", "b": "10.0.0.2:6789"}
    assert beat.leases == {}
    setup.age("b")
    beat = c.beat("a", LEASE_S)
    assert beat is not None and beat.live == {"a": "10.0.0.1:6789"}
    # b was dead to the others: its beat says so, and does not make it live again
    assert c.beat("b", LEASE_S) is None
    assert c.beat("b", LEASE_S) is None
    beat = c.beat("a", LEASE_S)
    assert beat is not None and set(beat.live) == {"a"}
    assert c.beat("nobody", LEASE_S) is None
    c.join("b", "10.0.0.3:6789")  # a restarted b joins again
    beat = c.beat("a", LEASE_S)
    assert beat is not None and beat.live["b"] == "10.0.0.3:6789"


def test_a_queue_is_claimed_from_free_or_dead_owners_only(setup: Setup) -> None:
    c = setup.cluster
    c.join("a", "A")
    c.join("b", "B")
    assert c.claim("q", "a", LEASE_S) == 1  # no lease row yet: the first epoch
    assert c.claim("q", "b", LEASE_S) is None  # a is live
    assert c.claim("q", "a", LEASE_S) is None  # held already: a knows its epoch
    setup.age("a")
    assert c.claim("q", "b", LEASE_S) == 2  # a is dead
    assert c.claim("q", "a", LEASE_S) is None  # a dead broker takes nothing
    beat = c.beat("b", LEASE_S)
    assert beat is not None and beat.leases == {"q": ("b", 2)}
    assert c.release("q", "a", 1) is False  # not a's any more
    assert c.release("q", "b", 1) is False  # not at that epoch
    assert c.release("q", "b", 2) is True
    c.join("a", "A")  # back as a new member
    assert c.claim("q", "a", LEASE_S) == 3  # free: taken, one epoch on
    beat = c.beat("a", LEASE_S)
    assert beat is not None and beat.leases == {"q": ("a", 3)}


def test_a_broker_restarted_under_its_id_claims_its_queues_afresh(setup: Setup) -> None:
    """Restarted with the same --broker-id within the lease, a broker holds nothing in
    memory: joining gives up what its id held, so it claims each queue again (a new
    epoch, which fences off any earlier process under that id) instead of finding it
    'held already' forever."""
    c = setup.cluster
    c.join("a", "A")
    assert c.claim("q", "a", LEASE_S) == 1
    c.join("a", "A")  # the same id, a new process
    beat = c.beat("a", LEASE_S)
    assert beat is not None and beat.leases == {"q": (None, 1)}
    assert c.claim("q", "a", LEASE_S) == 2


def test_a_broker_that_leaves_frees_its_queues_at_once(setup: Setup) -> None:
    c = setup.cluster
    c.join("a", "A")
    c.join("b", "B")
    assert [c.claim(q, "a", LEASE_S) for q in ("q1", "q2")] == [1, 1]
    assert c.claim("q3", "b", LEASE_S) == 1
    c.leave("a")
    beat = c.beat("b", LEASE_S)
    assert beat is not None
    assert beat.live == {"b": "B"}
    assert beat.leases == {"q1": (None, 1), "q2": (None, 1), "q3": ("b", 1)}
    assert c.claim("q1", "b", LEASE_S) == 2  # no lease time to wait out
    assert c.beat("a", LEASE_S) is None


def test_a_queue_is_loaded_alone(setup: Setup) -> None:
    setup.store.apply([
        queue_writes("q1", put(rec("a1", queue="q1")), put(rec("a2", queue="q1")),
                     finish(rec("d1", queue="q1", state="completed"), 1),
                     meta("q1", {"paused": True})),
        queue_writes("q2", put(rec("b1", queue="q2")),
                     finish(rec("d2", queue="q2", state="failed"))),
        queue_writes("q3", put(rec("c1", queue="q3")), meta("q3", {"paused": False}),
                     finish(rec("d3", queue="q3", state="completed"))),
    ])
    loaded = setup.cluster.load_queues(["q1", "q2", "nothing-here"])
    assert sorted(r["id"] for r in loaded.live_jobs) == ["a1", "a2", "b1"]
    assert loaded.queue_meta == {"q1": {"paused": True}}
    assert loaded.finished_counts == {("q1", "completed"): 1, ("q2", "failed"): 1}
    assert loaded.broker_records == {}


def test_job_ids_are_looked_up_live_or_finished(setup: Setup) -> None:
    setup.store.apply([
        queue_writes("mail", put(rec("live", queue="mail"))),
        queue_writes("sms", finish(rec("done", queue="sms", state="completed"))),
    ])
    assert setup.cluster.queues_of(["live", "done", "unknown", "x" * 600, ""]) == {
        "live": "mail", "done": "sms"}
    assert setup.cluster.queues_of([]) == {}


# --- fenced commits (PostgreSQL) ----------------------------------------------------------


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query).fetchall()  # type: ignore[arg-type]


def test_a_broker_that_lost_a_queue_commits_nothing_more_of_it(pg_dsn: str) -> None:
    held = Held("a", {})
    with closing(PgStorage(pg_dsn, outage_s=5, fence=held)) as first, \
            closing(PgStorage(pg_dsn, outage_s=5)) as second:
        a, b = tables_of(first), tables_of(second)
        a.join("a", "A")
        epoch = a.claim("q", "a", LEASE_S)
        assert epoch == 1
        held.epochs["q"] = epoch
        first.apply([queue_writes("q", put(rec("j1")))])
        assert _rows(pg_dsn, "SELECT count(*) FROM tq_live") == [(1,)]
        # a is cut off past its lease; b takes q
        _age(pg_dsn, "a")
        b.join("b", "B")
        assert b.claim("q", "b", LEASE_S) == 2
        with pytest.raises(Fenced) as lost:
            first.apply([
                queue_writes("q", put(rec("j2")),
                             finish(rec("j1", state="completed"), "r")),
                queue_writes(None, ("put_broker_record", "cron", "nightly", {"n": 1})),
            ])
        assert str(lost.value) == "lost the lease of queue 'q' (epoch 1) to another broker"
        # nothing of that batch: not the new job, not the finish, not its count, not
        # the broker record that came with it
        assert _rows(pg_dsn, "SELECT convert_from(id, 'UTF8') FROM tq_live") == [("j1",)]
        assert _rows(pg_dsn, "SELECT * FROM tq_finished_counts") == []
        assert _rows(pg_dsn, "SELECT count(*) FROM tq_finished") == [(0,)]
        assert _rows(pg_dsn, "SELECT count(*) FROM tq_broker_records") == [(0,)]
        assert first.count_finished("q", "completed") == 0
        # the new owner commits
        second_held = Held("b", {"q": 2})
        with closing(PgStorage(pg_dsn, outage_s=5, fence=second_held,
                               migrate_schema=False)) as owner:
            owner.apply([queue_writes("q", finish(rec("j1", state="completed"), "r"))])
            assert owner.count_finished("q", "completed") == 1


def test_the_check_comes_before_any_row_is_touched(pg_dsn: str) -> None:
    """A broker that lost a queue fails at the check, never waiting for the row locks of
    the queue's new owner: here a row it would write is locked by an open transaction.
    Waited for, the lock would time out, an error retried as an outage (StorageUnavailable
    after outage_s); checked first, the batch is Fenced at once."""
    held = Held("a", {"q": 1})
    with closing(PgStorage(pg_dsn + "?options=-clock_timeout%3D200", outage_s=1,
                           fence=held)) as stale:
        cluster = tables_of(stale)
        cluster.join("a", "A")
        cluster.join("b", "B")
        assert cluster.claim("q", "a", LEASE_S) == 1
        stale.apply([queue_writes("q", finish(rec("j", state="completed")))])
        _age(pg_dsn, "a")
        assert cluster.claim("q", "b", LEASE_S) == 2
        with psycopg.connect(pg_dsn) as owner:  # the new owner, mid-commit
            owner.execute("SELECT 1 FROM tq_finished FOR UPDATE")
            with pytest.raises(Fenced):
                stale.apply([queue_writes("q", finish(rec("j", state="failed")))])


def test_writes_of_a_queue_not_held_are_refused_before_any_io() -> None:
    # nothing listens on port 1: any I/O would retry for outage_s, then fail otherwise
    store = PgStorage("postgresql://nobody@127.0.0.1:1/none", outage_s=0.5,
                      migrate_schema=False, fence=Held("a", {"mine": 3}))
    try:
        with pytest.raises(Fenced, match="holds no lease of queue 'theirs'"):
            store.apply([queue_writes("mine", put(rec("j", queue="mine"))),
                         queue_writes("theirs", put(rec("k", queue="theirs")))])
    finally:
        store.close()


def test_a_claim_waits_for_a_commit_that_holds_the_fence(pg_dsn: str) -> None:
    """The race of a takeover and a commit of the old owner: whichever locks the lease
    row first wins. A commit's check holds the row FOR SHARE until it ends; the claim
    waits for it (here: gives up after lock_timeout), and once the commit is over, the
    claim goes through and the old owner's next check fails."""
    with closing(PgStorage(pg_dsn, outage_s=5)) as store:
        cluster = tables_of(store)
        cluster.join("a", "A")
        cluster.join("b", "B")
        assert cluster.claim("q", "a", LEASE_S) == 1
        _age(pg_dsn, "a")
        with psycopg.connect(pg_dsn) as committing:  # (a transaction, left open)
            assert committing.execute("SELECT tq_fence('a', ARRAY['q'], ARRAY[1::bigint])"
                                      ).fetchone() == (1,)
            with psycopg.connect(pg_dsn, autocommit=True) as claiming:
                claiming.execute("SET lock_timeout = '300ms'")
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    claiming.execute(L.CLAIM, {"queue": "q", "id": "b", "lease": LEASE_S})
            committing.commit()
        assert cluster.claim("q", "b", LEASE_S) == 2
        with psycopg.connect(pg_dsn) as committing:
            with pytest.raises(psycopg.Error, match=r"lost the lease of queue 'q' \(epoch 1\)"
                               ) as raised:
                committing.execute("SELECT tq_fence('a', ARRAY['q'], ARRAY[1::bigint])")
            assert raised.value.sqlstate == L.FENCED_SQLSTATE


def test_a_claim_in_a_thread_goes_through_once_the_commit_ends(pg_dsn: str) -> None:
    """The same race, the claim left to wait: it returns the new epoch only after the
    transaction holding the fence has committed, and the commit's rows are there for
    the new owner to load."""
    with closing(PgStorage(pg_dsn, outage_s=5)) as store:
        cluster = tables_of(store)
        cluster.join("a", "A")
        cluster.join("b", "B")
        assert cluster.claim("q", "a", LEASE_S) == 1
        _age(pg_dsn, "a")
        claimed: list[int | None] = []
        with psycopg.connect(pg_dsn) as committing:
            committing.execute("SELECT tq_fence('a', ARRAY['q'], ARRAY[1::bigint])")
            committing.execute("INSERT INTO tq_live VALUES ('late', 'q', %s)",
                               (K.encode_value(rec("late")),))
            waiter = threading.Thread(
                target=lambda: claimed.append(cluster.claim("q", "b", LEASE_S)))
            waiter.start()
            _wait_for_a_lock_wait(pg_dsn)
            assert claimed == []
            committing.commit()
        waiter.join(10)
        assert claimed == [2]
        assert [r["id"] for r in cluster.load_queues(["q"]).live_jobs] == ["late"]


def _wait_for_a_lock_wait(dsn: str) -> None:
    """Until some session waits for a row lock (the claim behind the fence)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type"
                               " = 'Lock' AND datname = current_database()").fetchone()
            if row and row[0]:
                return
            conn.execute("SELECT pg_sleep(0.005)")  # (pacing the polls of the view)
    raise AssertionError("the claim never waited for the lease row's lock")


def test_a_queue_taken_over_gets_exact_counts(pg_dsn: str) -> None:
    with closing(PgStorage(pg_dsn, outage_s=5)) as old, \
            closing(PgStorage(pg_dsn, outage_s=5)) as new:
        new.load()
        old.apply([queue_writes("q", *(finish(rec(f"d{i}", state="completed"))
                                       for i in range(3)))])
        assert new.count_finished("q", "completed") == 0  # (its copy, from load())
        tables_of(new).load_queues(["q"])
        assert new.count_finished("q", "completed") == 3
        new.forget_queue("q")
        assert new.count_finished("q", "completed") == 0


# --- broker records in a cluster -----------------------------------------------------------


def test_broker_records_load_by_kind_without_jobs(setup: Setup) -> None:
    records = Writes()
    records.put_broker_record("cron", "nightly", {"name": "nightly", "n": 1})
    records.put_broker_record("webhook", "w1", {"id": "w1"})
    records.put_broker_record("webhook", "w2", {"id": "w2"})
    records.put_broker_record("webhookish", "x", {"id": "x"})  # (a kind that starts alike)
    setup.store.apply([records, queue_writes("q", put(rec("j")))])
    c = setup.cluster
    assert c.load_broker_records(["webhook"]) == {
        "webhook": {"w1": {"id": "w1"}, "w2": {"id": "w2"}}}
    assert c.load_broker_records(["cron", "webhook"])["cron"] == {
        "nightly": {"name": "nightly", "n": 1}}
    assert c.load_broker_records(["none"]) == {}


def test_a_commit_that_changes_webhooks_raises_their_version_in_the_beat(
        pg_dsn: str) -> None:
    """The version of a kind of broker records moves in the very commit that changes
    one (a fenced batch of a cluster's broker), and each beat returns it: how every
    broker learns within a beat that another changed the webhooks."""
    with closing(PgStorage(pg_dsn, outage_s=5, fence=Held("a", {}))) as store:
        cluster = tables_of(store)
        cluster.join("a", "A")
        beat = cluster.beat("a", LEASE_S)
        assert beat is not None and dict(beat.versions) == {}
        add = queue_writes(None, ("put_broker_record", "webhook", "w1", {"id": "w1"}))
        store.apply([add])
        beat = cluster.beat("a", LEASE_S)
        assert beat is not None and dict(beat.versions) == {"webhook": 1}
        store.apply([queue_writes(None, ("put_broker_record", "webhook", "w1", None),
                                  ("put_broker_record", "cron", "c", {"n": 1}))])
        beat = cluster.beat("a", LEASE_S)
        assert beat is not None and dict(beat.versions) == {"webhook": 2, "cron": 1}
        cluster.claim("q", "a", LEASE_S)
        with closing(PgStorage(pg_dsn, outage_s=5, fence=Held("a", {"q": 1}),
                               migrate_schema=False)) as owner:
            owner.apply([queue_writes("q", put(rec("j")))])  # (no broker record)
        beat = cluster.beat("a", LEASE_S)
        assert beat is not None and dict(beat.versions) == {"webhook": 2, "cron": 1}
        assert cluster.load_broker_records(["webhook"]) == {}


# --- migrations 2 to 4 ----------------------------------------------------------------------------


def test_a_single_brokers_database_becomes_a_clusters(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        with conn.transaction():  # version 1, as an older trioqueue left it
            conn.execute(L.CREATE_VERSION_TABLE)
            for statement in L.MIGRATIONS[0].statements:
                conn.execute(statement)  # type: ignore[arg-type]
            conn.execute(L.RECORD_VERSION, (1, L.MIGRATIONS[0].description))
            conn.execute("INSERT INTO tq_live VALUES ('j1', 'busy', ''), ('j2', 'busy', '')")
            conn.execute("INSERT INTO tq_queue_meta VALUES ('paused', '')")
            conn.execute("INSERT INTO tq_finished_counts VALUES ('done', 'completed', 4),"
                         " ('emptied', 'failed', 0)")
        assert schema_version(conn) == 1
        assert migrate(conn) == list(range(2, L.LATEST_VERSION + 1))  # (and later ones)
        assert schema_version(conn) == L.LATEST_VERSION
        leases = conn.execute("SELECT queue, owner, epoch FROM tq_queue_leases"
                              " ORDER BY queue").fetchall()
    assert leases == [("busy", None, 0), ("done", None, 0), ("paused", None, 0)]
    with closing(PgStorage(pg_dsn, outage_s=5)) as store:
        cluster = tables_of(store)
        cluster.join("a", "A")
        assert cluster.claim("busy", "a", LEASE_S) == 1
        assert cluster.claim("emptied", "a", LEASE_S) == 1


def test_a_live_row_of_another_brokers_queue_is_never_replaced_or_deleted(
        pg_dsn: str) -> None:
    """Two brokers admitted one new custom id in their two queues at once (each looked
    it up before the other committed): the first job's row stays whole, whatever the
    second's broker writes for its own copy (a put, then its finish)."""
    with closing(PgStorage(pg_dsn, outage_s=5, fence=Held("a", {"qa": 1}))) as a, \
            closing(PgStorage(pg_dsn, outage_s=5, fence=Held("b", {"qb": 1}),
                              migrate_schema=False)) as b:
        for store, broker, queue in ((a, "a", "qa"), (b, "b", "qb")):
            tables_of(store).join(broker, broker.upper())
            assert tables_of(store).claim(queue, broker, LEASE_S) == 1
        a.apply([queue_writes("qa", put(rec("x", queue="qa", data="first")))])
        b.apply([queue_writes("qb", put(rec("x", queue="qb", data="second")))])
        b.apply([queue_writes("qb", finish(rec("x", queue="qb", state="completed"), 1))])
        loaded = tables_of(a).load_queues(["qa"])
        assert [(r["id"], r["data"]) for r in loaded.live_jobs] == [("x", "first")]
        # a batch of a's own queues may still replace and delete its rows
        a.apply([queue_writes("qa", put(rec("x", queue="qa", data="again")))])
        assert [r["data"] for r in tables_of(a).load_queues(["qa"]).live_jobs] == ["again"]
        a.apply([queue_writes("qa", finish(rec("x", queue="qa", state="completed"), 2))])
        assert tables_of(a).load_queues(["qa"]).live_jobs == []


def test_a_batch_with_inbox_messages_wakes_the_listeners_once(pg_dsn: str) -> None:
    """One notification per batch that wrote inbox messages, none for one that did not:
    what wakes a broker to read its queues' inboxes (LISTEN/NOTIFY)."""
    with closing(PgStorage(pg_dsn, outage_s=5, fence=Held("a", {"qa": 1}))) as a, \
            closing(PgStorage(pg_dsn, outage_s=5, migrate_schema=False)) as b:
        tables_of(a).join("a", "A")
        assert tables_of(a).claim("qa", "a", LEASE_S) == 1
        listener = tables_of(b)
        assert listener.wait_inbox(0.05) is False  # (listening from now on)
        a.apply([queue_writes("qa", put(rec("plain", queue="qa")))])
        assert listener.wait_inbox(0.2) is False
        messages = Writes()
        for i in range(3):
            messages.cluster.messages.append(("elsewhere", ["notice", f"j{i}", ["x"]]))
        a.apply([queue_writes("qa", put(rec("more", queue="qa"))), messages])
        assert listener.wait_inbox(5) is True
        assert listener.wait_inbox(0.2) is False  # (one for the batch, not per message)
        assert [q for _, q, _ in listener.inbox(["elsewhere"], 10)] == ["elsewhere"] * 3



# --- claims of new custom ids (tq_id_claims) ---------------------------------------------


def _settle(queue: str | None, done: list[tuple[str, str]],
            held: list[tuple[str, str]] | None = None, *calls: tuple[Any, ...]) -> Writes:
    """A batch of ``queue`` that settles claims (``done``: they go; ``held``: a flow's,
    held by its inbox messages from then on)."""
    w = queue_writes(queue, *calls)
    w.cluster.claims_done.extend(done)
    w.cluster.claims_held.extend(held or [])
    return w


@dataclass
class Owners:
    a: PgStorage  # broker a, holding qa at epoch 1
    b: PgStorage  # broker b, holding qb at epoch 1
    dsn: str

    def claims(self) -> list[tuple[Any, ...]]:
        return _rows(self.dsn, "SELECT convert_from(id, 'UTF8'), queue, broker, epoch"
                               " FROM tq_id_claims ORDER BY id")


@pytest.fixture
def owners(pg_dsn: str) -> Iterator[Owners]:
    with closing(PgStorage(pg_dsn, outage_s=5, fence=Held("a", {"qa": 1}))) as a, \
            closing(PgStorage(pg_dsn, outage_s=5, fence=Held("b", {"qb": 1}),
                              migrate_schema=False)) as b:
        for store, broker, queue in ((a, "a", "qa"), (b, "b", "qb")):
            tables_of(store).join(broker, broker.upper())
            assert tables_of(store).claim(queue, broker, LEASE_S) == 1
        yield Owners(a, b, pg_dsn)


def test_one_new_id_is_claimed_by_one_queue_until_its_admission_settles(
        owners: Owners) -> None:
    ca, cb = tables_of(owners.a), tables_of(owners.b)
    assert ca.claim_ids("a", LEASE_S, [("x", "qa")], []) == {"x": Claimed("qa", OURS)}
    assert owners.claims() == [("x", "qa", "a", 1)]  # tied to a's lease of qa
    # claimed again for the same queue (another push of it, in flight): still a's
    assert ca.claim_ids("a", LEASE_S, [("x", "qa")], []) == {"x": Claimed("qa", OURS)}
    # b's queue finds it taken (the duplicate answer); a look-up alone claims nothing
    assert cb.claim_ids("b", LEASE_S, [("x", "qb")], ["y"]) == {"x": Claimed("qa", THEIRS)}
    # the commit that admits the job settles the claim: the job is what is found now
    owners.a.apply([_settle("qa", [("x", "qa")], None, put(rec("x", queue="qa")))])
    assert owners.claims() == []
    assert cb.claim_ids("b", LEASE_S, [("x", "qb")], []) == {"x": Claimed("qa", LIVE)}
    # b's claim made by that look-up goes with the commit of b's duplicate answer
    assert owners.claims() == [("x", "qb", "b", 1)]
    owners.b.apply([_settle("qb", [("x", "qb")])])
    assert owners.claims() == []


def test_a_claim_whose_push_was_refused_frees_the_id_in_its_commit(owners: Owners) -> None:
    ca, cb = tables_of(owners.a), tables_of(owners.b)
    assert ca.claim_ids("a", LEASE_S, [("x", "qa")], []) == {"x": Claimed("qa", OURS)}
    # (b settling a claim it does not hold changes nothing)
    owners.b.apply([_settle("qb", [("x", "qa")])])
    assert owners.claims() == [("x", "qa", "a", 1)]
    owners.a.apply([_settle("qa", [("x", "qa")])])  # refused: no job, the claim goes
    assert cb.claim_ids("b", LEASE_S, [("x", "qb")], []) == {"x": Claimed("qb", OURS)}


def test_a_finished_job_of_the_id_is_found_and_the_claim_is_made(owners: Owners) -> None:
    """A new job of an id whose job finished replaces it (as on one broker): claimed,
    so one queue only does."""
    owners.a.apply([queue_writes("qa", finish(rec("x", queue="qa", state="completed")))])
    assert tables_of(owners.b).claim_ids("b", LEASE_S, [("x", "qb")], []) == {
        "x": Claimed("qa", FINISHED)}
    assert owners.claims() == [("x", "qb", "b", 1)]
    assert tables_of(owners.a).claim_ids("a", LEASE_S, [("x", "qa")], []) == {
        "x": Claimed("qb", THEIRS)}


def test_a_dead_brokers_claim_is_taken_once_its_queue_is(owners: Owners) -> None:
    """A claim left by a broker killed before its commit holds while the lease it was
    made under does (the broker may be paused, and commit yet), and is taken over once
    another broker has taken the queue (a new epoch: that broker can commit no more)."""
    ca, cb = tables_of(owners.a), tables_of(owners.b)
    assert ca.claim_ids("a", LEASE_S, [("x", "qa")], []) == {"x": Claimed("qa", OURS)}
    _age(owners.dsn, "a")
    assert cb.claim_ids("b", LEASE_S, [("x", "qb")], []) == {"x": Claimed("qa", THEIRS)}
    assert cb.claim("qa", "b", LEASE_S) == 2
    assert cb.claim_ids("b", LEASE_S, [("x", "qb")], []) == {"x": Claimed("qb", OURS)}
    assert owners.claims() == [("x", "qb", "b", 1)]


def test_a_claim_of_a_broker_that_gave_its_queue_back_is_free(owners: Owners) -> None:
    ca, cb = tables_of(owners.a), tables_of(owners.b)
    ca.claim_ids("a", LEASE_S, [("x", "qa")], [])
    ca.leave("a")  # (a SIGTERM: its last commit is in, its leases freed)
    assert cb.claim_ids("b", LEASE_S, [("x", "qb")], []) == {"x": Claimed("qb", OURS)}


def test_a_broker_that_joins_again_drops_its_old_claims(owners: Owners) -> None:
    ca = tables_of(owners.a)
    ca.claim_ids("a", LEASE_S, [("x", "qa"), ("y", "qr")], [])
    assert len(owners.claims()) == 2
    ca.join("a", "A")
    assert owners.claims() == []


def test_a_flows_claim_for_another_brokers_queue_is_held_by_its_message(
        owners: Owners) -> None:
    """A flow admitted by a for qr (a queue a does not serve): claimed while a is live,
    then held by the inbox message a's commit writes, whatever becomes of a, until the
    broker serving qr applies the message."""
    ca, cb = tables_of(owners.a), tables_of(owners.b)
    assert ca.claim_ids("a", LEASE_S, [("z", "qr")], []) == {"z": Claimed("qr", OURS)}
    assert owners.claims() == [("z", "qr", "a", None)]
    assert cb.claim_ids("b", LEASE_S, [("z", "qb")], []) == {"z": Claimed("qr", THEIRS)}
    owners.a.apply([_settle("qa", [], [("z", "qr")])])
    assert owners.claims() == [("z", "qr", None, None)]
    _age(owners.dsn, "a")
    assert cb.claim_ids("b", LEASE_S, [("z", "qb")], []) == {"z": Claimed("qr", THEIRS)}
    with closing(PgStorage(owners.dsn, outage_s=5, fence=Held("b", {"qr": 1}),
                           migrate_schema=False)) as adopter:
        assert cb.claim("qr", "b", LEASE_S) == 1
        adopter.apply([_settle("qr", [("z", "qr")], None, put(rec("z", queue="qr")))])
    assert owners.claims() == []
    assert cb.claim_ids("b", LEASE_S, [("z", "qb")], []) == {"z": Claimed("qr", LIVE)}


def test_a_flows_commit_fails_if_its_claim_was_taken_meanwhile(owners: Owners) -> None:
    """a was dead to the others (paused past its lease) between its claim and its
    flow's commit, and b took the id: a's commit is refused whole, as a lost lease's."""
    ca, cb = tables_of(owners.a), tables_of(owners.b)
    ca.claim_ids("a", LEASE_S, [("z", "qr")], [])
    _age(owners.dsn, "a")
    assert cb.claim_ids("b", LEASE_S, [("z", "qb")], []) == {"z": Claimed("qb", OURS)}
    with pytest.raises(Fenced, match="lost the claim of 1 job id"):
        owners.a.apply([_settle("qa", [], [("z", "qr")], put(rec("k", queue="qa")))])
    assert _rows(owners.dsn, "SELECT count(*) FROM tq_live") == [(0,)]


def test_a_claim_waits_for_a_commit_that_settles_one_and_then_sees_its_job(
        owners: Owners) -> None:
    """A claim made while another broker's commit admitting the id is in flight waits
    for that commit, then finds its job (a fresh look after the claim): never an id
    free in an old snapshot while its job is being committed."""
    ca, cb = tables_of(owners.a), tables_of(owners.b)
    ca.claim_ids("a", LEASE_S, [("x", "qa")], [])
    found: list[dict[str, Claimed]] = []
    with psycopg.connect(owners.dsn) as committing:  # a's commit, left open
        committing.execute("DELETE FROM tq_id_claims WHERE id = %s", (K.job_key("x"),))
        committing.execute("INSERT INTO tq_live VALUES (%s, 'qa', %s)",
                           (K.job_key("x"), K.encode_value(rec("x", queue="qa"))))
        waiter = threading.Thread(target=lambda: found.append(
            cb.claim_ids("b", LEASE_S, [("x", "qb")], [])))
        waiter.start()
        _wait_for_a_lock_wait(owners.dsn)
        assert found == []
        committing.commit()
    waiter.join(10)
    assert found == [{"x": Claimed("qa", LIVE)}]
