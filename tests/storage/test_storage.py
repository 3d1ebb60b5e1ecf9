"""Storage adapters: the same behaviour from MemoryStorage and LmdbStorage.

Most tests run against both adapters; LMDB-only tests cover map growth, a full map,
and durability across close/reopen; a hypothesis test drives random operation sequences
through both adapters and a naive reference model and compares every read. Dependency
outcome rows (a flow child's outcome, kept for its parent) have their own section.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trioqueue.core.job import JobRecord
from trioqueue.core.writes import PutDepOutcome, Writes
from trioqueue.storage import keys as K
from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Recovered, Storage, StorageFullError

from .stores import MIB, only_key_value, store_fixture

KIB = 1024


def rec(
    job_id: str,
    queue: str = "q",
    state: str = "queued",
    created: int = 0,
    **attrs: Any,
) -> dict[str, Any]:
    return JobRecord(id=job_id, queue=queue, state=state, created_at=created, **attrs).to_record()


def writes(*calls: tuple[str, Any]) -> Writes:
    w = Writes()
    for name, *args in calls:
        getattr(w, name)(*args)
    return w


def put(r: dict[str, Any]) -> tuple[Any, ...]:
    return ("put_job", r)


def finish(r: dict[str, Any], *result: Any) -> tuple[Any, ...]:
    return ("finish_job", r, bool(result), result[0] if result else None)


def delete(job_id: str) -> tuple[Any, ...]:
    return ("delete_job", job_id)


def meta(queue: str, m: dict[str, Any]) -> tuple[Any, ...]:
    return ("put_queue_meta", queue, m)


def dep(parent_id: str, child_id: str, outcome: dict[str, Any]) -> tuple[Any, ...]:
    return ("put_dep_outcome", parent_id, child_id, outcome)


def apply(store: Storage, *calls: tuple[Any, ...]) -> None:
    store.apply([writes(*calls)])


def ids(records: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in records]


store = store_fixture(1 * MIB, postgres=True)


# --- basics -------------------------------------------------------------------------


def test_put_load_round_trip(store: Storage) -> None:
    a = rec("a", data={"x": [1, 2.5, None, "é", b"\x00raw"], "n": -(2**40)})
    b = rec("b", queue="other", state="active", created=-5)
    c = rec("c", state="waiting-children", tags=["t"])
    apply(store, put(b), put(a), put(c), meta("q", {"paused": True, "rateLimit": 10}))
    got = store.load()
    assert got.live_jobs == [a, b, c]  # in job-id order
    assert got.queue_meta == {"q": {"paused": True, "rateLimit": 10}}
    assert got.finished_counts == {}
    assert store.get_finished("a") is None
    assert store.get_result("a") == (False, None)


def test_stored_records_do_not_alias_the_callers(store: Storage) -> None:
    a = rec("a", data={"x": [1]})
    apply(store, put(a), meta("q", {"m": [1]}))
    a["data"]["x"].append(2)
    a["attempts"] = 9
    loaded = store.load()
    assert loaded.live_jobs[0]["data"] == {"x": [1]}
    assert loaded.live_jobs[0].get("attempts", 0) == 0
    loaded.live_jobs[0]["data"]["x"].append(3)
    assert store.load().live_jobs[0]["data"] == {"x": [1]}


def test_put_job_upserts_and_meta_overwrites(store: Storage) -> None:
    apply(store, put(rec("a", attempts=1)), meta("q", {"v": 1}))
    apply(store, put(rec("a", state="active", attempts=2)), meta("q", {"v": 2}))
    got = store.load()
    assert [(r["state"], r.get("attempts", 0)) for r in got.live_jobs] == [("active", 2)]
    assert got.queue_meta == {"q": {"v": 2}}


def test_empty_apply_is_a_no_op(store: Storage) -> None:
    store.apply([])
    store.apply([Writes(), Writes()])
    assert store.load() == Recovered()


def test_batches_apply_in_order(store: Storage) -> None:
    w1 = writes(put(rec("a")), put(rec("b")))
    w2 = writes(finish(rec("a", state="completed"), 1), delete("b"))
    store.apply([w1, w2])
    assert store.load().live_jobs == []
    assert store.get_result("a") == (True, 1)
    assert store.load().finished_counts == {("q", "completed"): 1}


def test_finish_get_finished_result_and_counts(store: Storage) -> None:
    apply(store, *(put(rec(i)) for i in "abcde"))
    done_none = rec("a", state="completed", created=1)
    done_plain = rec("b", state="completed", created=2)
    done_value = rec("c", state="completed", created=3)
    failed = rec("d", state="failed", created=4, stacktrace=["boom"])
    apply(
        store,
        finish(done_none, None),
        finish(done_plain),
        finish(done_value, {"x": [1, b"b"]}),
        finish(failed),
    )
    assert store.get_finished("a") == done_none
    assert store.get_finished("d") == failed
    assert store.get_finished("e") is None  # still live
    assert store.get_finished("zz") is None
    assert store.get_result("a") == (True, None)  # a stored None is a result
    assert store.get_result("b") == (False, None)  # no result at all
    assert store.get_result("c") == (True, {"x": [1, b"b"]})
    assert store.get_result("d") == (False, None)
    got = store.load()
    assert ids(got.live_jobs) == ["e"]
    assert got.finished_counts == {("q", "completed"): 3, ("q", "failed"): 1}


def test_refinish_moves_index_and_count(store: Storage) -> None:
    apply(store, finish(rec("a", state="completed", created=1), "r1"))
    # the same id finishes again (another generation): failed, in another queue
    apply(store, finish(rec("a", queue="q2", state="failed", created=7)))
    assert store.load().finished_counts == {("q2", "failed"): 1}
    assert store.list_finished("q", "completed", asc=True, offset=0, limit=10) == []
    assert ids(store.list_finished("q2", "failed", asc=True, offset=0, limit=10)) == ["a"]
    assert list(store.iter_finished_ids("q", "completed")) == []
    assert store.get_result("a") == (False, None)  # the old generation's result is gone
    apply(store, finish(rec("a", queue="q2", state="failed", created=7), "r3"))
    assert store.get_result("a") == (True, "r3")
    assert store.load().finished_counts == {("q2", "failed"): 1}


def test_delete_job_from_live_and_finished(store: Storage) -> None:
    apply(store, put(rec("live1")), put(rec("live2")))
    apply(
        store,
        finish(rec("f1", state="completed", created=1), "res"),
        finish(rec("f2", state="completed", created=2)),
        finish(rec("f3", state="failed", created=3)),
    )
    apply(store, delete("live1"), delete("f1"), delete("f3"), delete("never-existed"))
    got = store.load()
    assert ids(got.live_jobs) == ["live2"]
    assert got.finished_counts == {("q", "completed"): 1}  # zero counts disappear
    assert store.get_finished("f1") is None
    assert store.get_result("f1") == (False, None)
    assert ids(store.list_finished("q", "completed", asc=True, offset=0, limit=9)) == ["f2"]
    assert store.list_finished("q", "failed", asc=False, offset=0, limit=9) == []
    assert list(store.iter_finished_ids("q", "completed")) == ["f2"]
    assert list(store.iter_finished_ids("q", "failed")) == []
    apply(store, delete("f1"))  # deleting twice is fine


def test_finish_removes_the_live_record(store: Storage) -> None:
    apply(store, put(rec("a", state="active")))
    apply(store, finish(rec("a", state="completed")))
    assert store.load().live_jobs == []


def test_custom_id_reuse(store: Storage) -> None:
    apply(store, put(rec("custom", created=1)))
    apply(store, finish(rec("custom", state="completed", created=1), "gen1"))
    # a new job reuses the finished custom id: the broker deletes the old generation
    apply(store, delete("custom"), put(rec("custom", created=2, data="gen2")))
    got = store.load()
    assert [(r["id"], r["data"]) for r in got.live_jobs] == [("custom", "gen2")]
    assert got.finished_counts == {}
    assert store.get_finished("custom") is None
    assert store.get_result("custom") == (False, None)
    assert list(store.iter_finished_ids("q", "completed")) == []
    apply(store, finish(rec("custom", state="completed", created=2, data="gen2"), "r2"))
    assert store.load().live_jobs == []
    assert store.load().finished_counts == {("q", "completed"): 1}
    assert store.get_result("custom") == (True, "r2")
    assert [
        r["data"] for r in store.list_finished("q", "completed", asc=True, offset=0, limit=5)
    ] == ["gen2"]


# --- ordering -----------------------------------------------------------------------

ORDER_CASES = [
    ("b", 5),
    ("a", 5),
    ("c", 5),
    ("neg", -3),
    ("very-neg", -4_320_000_000_000_000),
    ("very-pos", 4_320_000_000_000_000),
    ("zero", 0),
    ("é", 0),  # non-ASCII id sorts after ASCII ones at the same time
    ("z\x00", 0),
    ("z", 0),
    ("min", -(2**63)),
    ("max", 2**63 - 1),
]


def _expected_order() -> list[str]:
    return [i for i, _ in sorted(ORDER_CASES, key=lambda t: (t[1], t[0]))]


@pytest.fixture
def ordered(store: Storage) -> Storage:
    apply(store, *(finish(rec(i, state="completed", created=c)) for i, c in ORDER_CASES))
    # neighbours that must not leak into ("q", "completed")
    apply(
        store,
        finish(rec("other-state", state="failed", created=1)),
        finish(rec("other-queue", queue="q2", state="completed", created=1)),
        finish(rec("prefix-queue", queue="q-", state="completed", created=1)),
        finish(rec("short-queue", queue="p", state="completed", created=1)),
        put(rec("live", created=1)),
    )
    return store


def test_list_finished_orders_by_created_then_id(ordered: Storage) -> None:
    expected = _expected_order()
    assert expected[:3] == ["min", "very-neg", "neg"]
    assert expected[3:7] == ["z", "z\x00", "zero", "é"]
    got = ordered.list_finished("q", "completed", asc=True, offset=0, limit=100)
    assert ids(got) == expected
    got = ordered.list_finished("q", "completed", asc=False, offset=0, limit=100)
    assert ids(got) == expected[::-1]
    assert list(ordered.iter_finished_ids("q", "completed")) == expected


@pytest.mark.parametrize("asc", [True, False])
def test_list_finished_offset_and_limit(ordered: Storage, asc: bool) -> None:
    expected = _expected_order()
    if not asc:
        expected = expected[::-1]
    n = len(expected)
    for offset in range(n + 2):
        for limit in (0, 1, 2, 5, n, n + 5):
            got = ordered.list_finished("q", "completed", asc=asc, offset=offset, limit=limit)
            assert ids(got) == expected[offset : offset + limit], (offset, limit)
    assert ids(ordered.list_finished("q", "completed", asc=asc, offset=-3, limit=2)) == expected[:2]


def test_list_finished_unknown_queue_and_bad_state(ordered: Storage) -> None:
    assert ordered.list_finished("nope", "completed", asc=True, offset=0, limit=5) == []
    assert ordered.list_finished("x" * 600, "failed", asc=True, offset=0, limit=5) == []
    assert list(ordered.iter_finished_ids("nope", "failed")) == []
    with pytest.raises(ValueError):
        ordered.list_finished("q", "active", asc=True, offset=0, limit=5)
    with pytest.raises(ValueError):
        ordered.iter_finished_ids("q", "waiting")


def test_iter_finished_ids_spans_chunks(store: Storage) -> None:
    n = 2500
    apply(store, *(finish(rec(f"j{i:05d}", state="failed", created=n - i)) for i in range(n)))
    expected = [f"j{i:05d}" for i in reversed(range(n))]
    assert list(store.iter_finished_ids("q", "failed")) == expected
    # writes between chunks are seen by the next chunk (no long read snapshot)
    it = store.iter_finished_ids("q", "failed")
    first = [next(it) for _ in range(1000)]
    apply(store, delete(expected[1500]))
    remaining = expected[:1500] + expected[1501:]
    assert first + list(it) == remaining
    # offsets past the middle (walked from the other end in LMDB) and before it
    for offset in (0, 3, 1248, 1249, 1250, 2000, 2496, 2498, 2499):
        for asc in (True, False):
            order = remaining if asc else remaining[::-1]
            got = store.list_finished("q", "failed", asc=asc, offset=offset, limit=3)
            assert ids(got) == order[offset : offset + 3], (asc, offset)


# --- pages at any offset, and pages of ids for bounded-slice deletes -----------------
#
# The LMDB adapter finds an offset through a position index (storage/positions.py) for
# ranges of four blocks or more; ``paged`` makes its blocks 2 keys long, so a range of 8
# finished jobs is indexed and a few dozen split and merge blocks all the time.


@pytest.fixture(params=["memory", "lmdb", "lmdb-small-blocks", "postgres"])
def paged(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Storage]:
    s: Storage
    if request.param == "memory":
        s = MemoryStorage()
    elif request.param == "lmdb":
        s = LmdbStorage(tmp_path / "db", map_size_bytes=4 * MIB)
    elif request.param == "postgres":  # (pages counted from the nearer end)
        from trioqueue.storage.pg.store import PgStorage

        s = PgStorage(request.getfixturevalue("pg_dsn"), outage_s=5)
    else:
        s = LmdbStorage(tmp_path / "db", map_size_bytes=4 * MIB, position_block=2)
    yield s
    s.close()


def _listings_match(store: Storage, expected: list[str], queue: str = "q",
                    state: str = "completed") -> None:
    """Every page of one range, at every offset, both orders, against ``expected``."""
    n = len(expected)
    assert store.count_finished(queue, state) == n
    for asc in (True, False):
        order = expected if asc else expected[::-1]
        for offset in range(n + 2):
            for limit in (1, 3, n + 1):
                got = store.list_finished(queue, state, asc=asc, offset=offset, limit=limit)
                assert ids(got) == order[offset : offset + limit], (asc, offset, limit)


def test_pages_at_every_offset_after_inserts_and_deletes(paged: Storage) -> None:
    # createdAt ties, negative times, inserts in the middle and at both ends
    jobs = {f"j{i:02d}": (i * 7) % 11 - 3 for i in range(40)}
    apply(paged, *(finish(rec(j, state="completed", created=c)) for j, c in jobs.items()))
    apply(paged, finish(rec("other", state="failed", created=0)))

    def expected() -> list[str]:
        return [j for j, _ in sorted(jobs.items(), key=lambda t: (t[1], t[0]))]

    _listings_match(paged, expected())
    doomed = expected()[5:25:2] + expected()[-3:]
    apply(paged, *(delete(j) for j in doomed))
    for j in doomed:
        del jobs[j]
    _listings_match(paged, expected())
    jobs.update({"new-first": -50, "new-mid": 2, "new-last": 99})
    apply(paged, *(finish(rec(j, state="completed", created=jobs[j]))
                   for j in ("new-first", "new-mid", "new-last")))
    _listings_match(paged, expected())
    # a re-finish moves a job within the range (and another out of it)
    jobs["j00"] = 50
    del jobs["j01"]
    apply(paged, finish(rec("j00", state="completed", created=50)),
          finish(rec("j01", state="failed", created=1)))
    _listings_match(paged, expected())
    _listings_match(paged, ["other", "j01"], state="failed")  # createdAt 0, then 1


def test_lmdb_position_index_is_rebuilt_on_open_and_small(tmp_path: Any) -> None:
    path = tmp_path / "db"
    store = LmdbStorage(path, map_size_bytes=16 * MIB)
    n = 10_000  # past the default index threshold (4 blocks of 1,024)
    apply(store, *(finish(rec(f"j{i:05d}", state="completed", created=i)) for i in range(n)))
    expected = [f"j{i:05d}" for i in range(n)]
    apply(store, *(delete(f"j{i:05d}") for i in range(3000, 3500)))
    del expected[3000:3500]
    store.close()
    store = LmdbStorage(path, map_size_bytes=16 * MIB)
    for offset in (0, 1, 2999, 3000, 5000, len(expected) - 1):
        for asc in (True, False):
            order = expected if asc else expected[::-1]
            got = store.list_finished("q", "completed", asc=asc, offset=offset, limit=7)
            assert ids(got) == order[offset : offset + 7], (asc, offset)
    # one anchor every block or so, not a copy of the keys
    positions = store._index.tracked[K.finished_prefix("q", "completed")]
    assert len(positions.anchors) <= 2 * len(expected) // 1024 + 2
    store.close()


def _all_pages(store: Storage, limit: int, queue: str = "q",
               state: str = "completed") -> list[list[str]]:
    pages: list[list[str]] = []
    after = None
    for _ in range(1000):
        page = store.finished_ids_page(queue, state, after=after, limit=limit)
        pages.append(page.ids)
        if page.after is None:
            return pages
        assert page.ids and len(page.ids) == limit
        after = page.after
    raise AssertionError("the pages never ended")


def test_finished_ids_pages_walk_the_range_in_order(paged: Storage) -> None:
    apply(paged, *(finish(rec(i, state="completed", created=c)) for i, c in ORDER_CASES))
    apply(paged, finish(rec("elsewhere", queue="q2", state="completed", created=0)))
    expected = _expected_order()
    for limit in (1, 2, 5, len(expected), len(expected) + 1):
        pages = _all_pages(paged, limit)
        assert [j for page in pages for j in page] == expected, limit
        assert all(len(page) == limit for page in pages[:-1])
    assert _all_pages(paged, 4, queue="nope") == [[]]
    assert _all_pages(paged, 4, state="failed") == [[]]
    assert paged.finished_ids_page("x" * 600, "failed", after=None, limit=3).ids == []
    with pytest.raises(ValueError, match="positive"):
        paged.finished_ids_page("q", "completed", after=None, limit=0)
    with pytest.raises(ValueError):
        paged.finished_ids_page("q", "active", after=None, limit=3)


def test_finished_ids_pages_delete_in_bounded_slices(paged: Storage) -> None:
    """Obliterate's loop: a page, delete it, the next page after its cursor."""
    apply(paged, *(finish(rec(f"j{i:03d}", state="completed", created=i // 3))
                   for i in range(50)))
    seen: list[str] = []
    after = None
    for round_ in range(100):
        page = paged.finished_ids_page("q", "completed", after=after, limit=8)
        seen.extend(page.ids)
        apply(paged, *(delete(j) for j in page.ids))  # the cursor's own job goes too
        if round_ == 1:
            # meanwhile: a job finishes after the cursor (seen later), one before (not)
            apply(paged, finish(rec("late", state="completed", created=1000)),
                  finish(rec("early", state="completed", created=-1)))
        if page.after is None:
            break
        after = page.after
    assert seen == [f"j{i:03d}" for i in range(50)] + ["late"]
    assert ids(paged.list_finished("q", "completed", asc=True, offset=0, limit=10)) == ["early"]
    assert paged.count_finished("q", "completed") == 1


ids_ops = st.lists(
    st.one_of(
        st.tuples(st.just("finish"), st.integers(0, 29), st.integers(-3, 3),
                  st.sampled_from(["completed", "failed"])),
        st.tuples(st.just("delete"), st.integers(0, 29)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ids_ops, min_size=1, max_size=10), st.integers(1, 5))
def test_pages_match_a_naive_listing(batches: list[list[tuple[Any, ...]]], limit: int) -> None:
    model = Model()
    with tempfile.TemporaryDirectory() as tmp:
        stores: list[Storage] = [MemoryStorage(), LmdbStorage(tmp, map_size_bytes=4 * MIB,
                                                              position_block=2)]
        try:
            for batch in batches:
                calls: list[tuple[Any, ...]] = []
                for op in batch:
                    if op[0] == "finish":
                        calls.append(finish(rec(f"j{op[1]}", state=op[3], created=op[2])))
                    else:
                        calls.append(delete(f"j{op[1]}"))
                model.apply(calls)
                for store in stores:
                    apply(store, *calls)
                for state in ("completed", "failed"):
                    expected = [r["id"] for r in model.ordered("q", state)]
                    for store in stores:
                        _listings_match(store, expected, state=state)
                        pages = _all_pages(store, limit, state=state)
                        assert [j for page in pages for j in page] == expected
        finally:
            for store in stores:
                store.close()


# --- validation and atomicity -------------------------------------------------------


def test_overlong_keys_raise_value_error_and_apply_nothing(store: Storage) -> None:
    only_key_value(store, "no finished index key to fit into 511 bytes")
    apply(store, put(rec("keep")))
    too_long = "é" * 256  # 256 characters, 512 bytes: over LMDB's 511-byte keys
    with pytest.raises(ValueError, match="511"):
        apply(store, put(rec("new")), put(rec(too_long)))
    # 250 three-byte characters fit as a job key but not in the finished index key
    long_id = "\u20ac" * 167  # 501 bytes
    with pytest.raises(ValueError, match="finished index"):
        apply(store, delete("keep"), finish(rec(long_id, queue="qq", state="completed")))
    with pytest.raises(ValueError):
        apply(store, delete("keep"), put(rec("")))
    with pytest.raises(ValueError):
        apply(store, delete("keep"), finish(rec("x", state="active")))
    with pytest.raises(ValueError):
        apply(store, delete("keep"), put(rec("x", state="completed")))
    with pytest.raises(ValueError):
        apply(store, delete("keep"), meta("bad\x00queue", {}))
    assert ids(store.load().live_jobs) == ["keep"]
    apply(store, put(rec(long_id)))  # fine as a live job
    assert store.get_finished(too_long) is None
    assert store.get_result(too_long) == (False, None)


def test_memory_max_bytes_is_atomic() -> None:
    store = MemoryStorage(max_bytes=20_000)
    apply(store, *(put(rec(f"j{i}", data="x" * 100)) for i in range(10)))
    apply(store, finish(rec("j0", state="completed", created=1), "r"), meta("q", {"a": 1}))
    before = store.load()
    size = store.size_bytes
    listing = store.list_finished("q", "completed", asc=True, offset=0, limit=10)
    big = [put(rec(f"k{i}", data="y" * 1000)) for i in range(30)]
    with pytest.raises(StorageFullError):
        apply(store, delete("j1"), finish(rec("j2", state="failed"), 1), meta("q", {}), *big)
    assert store.load() == before
    assert store.size_bytes == size
    assert store.list_finished("q", "completed", asc=True, offset=0, limit=10) == listing
    assert list(store.iter_finished_ids("q", "failed")) == []
    assert store.get_result("j2") == (False, None)
    apply(store, *big[:5])  # a smaller batch still fits
    apply(store, delete("j0"), *(delete(f"j{i}") for i in range(10)))
    assert store.load().finished_counts == {}


# --- LMDB specifics -----------------------------------------------------------------


def _fill(store: LmdbStorage, prefix: str, per_batch: int, size: int) -> int:
    """put_job batches until StorageFullError; returns how many batches were applied."""
    for n in range(10_000):
        batch = [put(rec(f"{prefix}{n:04d}-{i}", data="x" * size)) for i in range(per_batch)]
        try:
            apply(store, *batch)
        except StorageFullError:
            return n
    raise AssertionError("never filled up")


def test_lmdb_full_map_applies_nothing_and_deletes_still_work(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    reserve_used = []
    real = LmdbStorage._write_in_reserve

    def spy(self: LmdbStorage, ops: list[tuple[Any, ...]]) -> None:
        reserve_used.append(len(ops))
        real(self, ops)

    monkeypatch.setattr(LmdbStorage, "_write_in_reserve", spy)
    store = LmdbStorage(tmp_path / "db", map_size_bytes=64 * KIB, max_map_size_bytes=128 * KIB)
    apply(store, meta("q", {"keep": True}))
    applied = _fill(store, "j", 5, 400)
    assert applied > 0
    assert store.map_size == 128 * KIB
    live = store.load().live_jobs
    assert len(live) == applied * 5
    assert not any(r["id"].startswith(f"j{applied:04d}-") for r in live)  # failed batch
    # a mixed batch fails as a whole too
    with pytest.raises(StorageFullError):
        apply(store, delete(live[0]["id"]), *(put(rec(f"z{i}", data="z" * 400)) for i in range(20)))
    assert len(store.load().live_jobs) == applied * 5
    # deletes-only applies may use the reserve, so a full store is never wedged
    doomed = [r["id"] for r in live[5:]]
    for job_id in doomed[:3]:
        apply(store, delete(job_id))
    apply(store, *(delete(j) for j in doomed[3:]))
    assert reserve_used  # at least one of those deletes needed the reserve
    assert store.map_size <= 128 * KIB + 4 * KIB
    # once the freed pages are reusable, finishing works again
    apply(store, finish(rec(live[0]["id"], state="completed", created=1), "done"))
    assert store.get_result(live[0]["id"]) == (True, "done")
    got = store.load()
    assert ids(got.live_jobs) == [r["id"] for r in live[1:5]]
    assert got.finished_counts == {("q", "completed"): 1}
    assert got.queue_meta == {"q": {"keep": True}}
    store.close()


def test_lmdb_map_grows(tmp_path: Any) -> None:
    store = LmdbStorage(tmp_path / "db", map_size_bytes=64 * KIB, max_map_size_bytes=64 * MIB)
    payload = "p" * 1000
    for b in range(5):  # 5 x 1000 x ~1.7 KB records: well over 5 MB
        apply(store, *(put(rec(f"j{b}-{i:04d}", data=payload)) for i in range(1000)))
    assert store.map_size > 5 * MIB
    assert store.map_size <= 64 * MIB
    assert len(store.load().live_jobs) == 5000
    store.close()
    # reopening with the small configured size keeps (and can still grow) the data
    store = LmdbStorage(tmp_path / "db", map_size_bytes=64 * KIB, max_map_size_bytes=64 * MIB)
    assert len(store.load().live_jobs) == 5000
    apply(store, *(put(rec(f"k-{i:04d}", data=payload)) for i in range(1000)))
    assert len(store.load().live_jobs) == 6000
    store.close()


def test_lmdb_durable_across_reopen(tmp_path: Any) -> None:
    path = tmp_path / "db"
    store = LmdbStorage(path)
    apply(store, put(rec("a", data={"b": b"\x01"})), put(rec("b")), meta("q", {"paused": True}))
    apply(
        store,
        finish(rec("b", state="completed", created=2), None),
        finish(rec("c", state="failed", created=1)),
        finish(rec("d", state="completed", created=-1), [1, 2]),
    )
    store.sync()
    before = store.load()
    listing = store.list_finished("q", "completed", asc=False, offset=0, limit=10)
    store.close()
    store.close()  # idempotent
    with pytest.raises(RuntimeError):
        store.load()

    again = LmdbStorage(path)
    assert again.load() == before
    assert before.finished_counts == {("q", "completed"): 2, ("q", "failed"): 1}
    assert again.list_finished("q", "completed", asc=False, offset=0, limit=10) == listing
    assert ids(listing) == ["b", "d"]
    assert again.get_result("b") == (True, None)
    assert again.get_result("c") == (False, None)
    assert again.get_result("d") == (True, [1, 2])
    again.close()


def test_lmdb_fsync_on_commit(tmp_path: Any) -> None:
    store = LmdbStorage(tmp_path / "db", fsync_on_commit=True)
    apply(store, put(rec("a")))
    store.sync()
    assert ids(store.load().live_jobs) == ["a"]
    store.close()


def test_lmdb_refuses_another_schema(tmp_path: Any) -> None:
    path = tmp_path / "db"
    LmdbStorage(path).close()
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        db = env.open_db(K.DB_META, txn=txn)
        txn.put(K.SCHEMA_KEY, K.encode_schema(K.SCHEMA_VERSION + 1), db=db)
    env.close()
    with pytest.raises(RuntimeError, match="schema"):
        LmdbStorage(path)


def test_keys_layout() -> None:
    prefix = K.finished_prefix("emails", "failed")
    assert prefix == b"emails\x00f" == K.count_key("emails", "failed")
    key = K.finished_idx_key(prefix, -1, K.job_key("id-1"))
    assert key == b"emails\x00f" + b"\x7f" + b"\xff" * 7 + b"id-1"
    assert K.split_finished_idx_key(key) == ("emails", "failed", -1, "id-1")
    assert K.decode_count_key(prefix) == ("emails", "failed")
    assert K.encode_created(0) < K.encode_created(1) and K.encode_created(-2) < K.encode_created(-1)
    assert K.decode_created(K.encode_created(-4_320_000_000_000_000)) == -4_320_000_000_000_000
    with pytest.raises(ValueError):
        K.encode_created(2**63)
    assert K.prefix_end(prefix) == b"emails\x00g"
    assert K.decode_result(K.encode_result(None)) is None
    dkey = K.dep_key("pa\x00", "é")
    assert dkey == b"\x00\x03pa\x00" + "é".encode() == K.dep_prefix("pa\x00") + "é".encode()
    assert K.dep_key_prefix(dkey) == K.dep_prefix("pa\x00")
    assert K.dep_child_id(dkey) == "é"
    assert K.split_dep_key(dkey) == ("pa\x00", "é")
    assert K.lookup_dep_prefix("x" * 512) is None  # not a job id at all
    assert K.lookup_dep_prefix("x" * 509) is None  # a job id, but no room for a child
    assert K.lookup_dep_prefix("x" * 508) == b"\x01\xfc" + b"x" * 508
    assert K.DB_DEPS in K.ALL_DBS


# --- space accounting (admission of new jobs) ----------------------------------------


def test_used_bytes_grows_with_puts_and_drops_after_deletes(store: Storage) -> None:
    only_key_value(store, "a deleted row's space is free again after VACUUM, and the "
                          "size is measured every few seconds")
    empty = store.used_bytes()
    assert empty >= 0
    apply(store, *(put(rec(f"j{i:04d}", data="x" * 300)) for i in range(300)))
    full = store.used_bytes()
    assert full >= empty + 300 * 300  # at least the data itself
    apply(store, *(finish(rec(f"j{i:04d}", state="completed", created=i), "r")
                   for i in range(100)))
    apply(store, *(delete(f"j{i:04d}") for i in range(300)))
    freed = store.used_bytes()
    # Freed at once, from the commit that deletes: no turn-over needed to count it.
    assert freed < full
    assert freed <= empty + 3 * 4 * KIB  # back to (about) empty: a few pages at most
    assert store.used_bytes_bound() >= store.used_bytes()


def test_memory_used_bytes_is_its_size_and_max_bytes_its_limit() -> None:
    assert MemoryStorage().max_bytes is None
    store = MemoryStorage(max_bytes=50_000)
    assert store.max_bytes == 50_000
    apply(store, put(rec("a", data="x" * 100)))
    assert store.used_bytes() == store.size_bytes == store.used_bytes_bound() > 100


def test_lmdb_max_bytes_and_initial_map(tmp_path: Any) -> None:
    small = LmdbStorage(tmp_path / "small", max_map_size_bytes=2 * MIB)
    assert small.max_bytes == 2 * MIB
    assert small.map_size == 2 * MIB  # starts at the maximum when that is below 1 GiB
    small.close()
    default = LmdbStorage(tmp_path / "default")
    assert default.max_bytes == 1 << 40
    assert default.map_size == 1 << 30
    # an empty store: the two meta pages, the main database and the schema record
    assert default.used_bytes() <= 8 * 4 * KIB
    default.close()


def test_lmdb_bound_is_the_high_water_mark(tmp_path: Any) -> None:
    store = LmdbStorage(tmp_path / "db", max_map_size_bytes=4 * MIB)
    apply(store, *(put(rec(f"j{i:04d}", data="x" * 300)) for i in range(1000)))
    high = store.used_bytes_bound()
    assert high >= store.used_bytes()
    apply(store, *(delete(f"j{i:04d}") for i in range(1000)))
    assert store.used_bytes() < high // 4
    assert store.used_bytes_bound() >= high  # the file's high-water mark never drops
    store.close()


def test_lmdb_space_freed_by_deletes_is_reused_in_a_full_map(tmp_path: Any) -> None:
    """A map full at its maximum takes as much again once deletes freed it, and
    used_bytes says so: what the broker relies on to take new jobs again."""
    store = LmdbStorage(tmp_path / "db", map_size_bytes=256 * KIB,
                        max_map_size_bytes=256 * KIB)
    applied = _fill(store, "a", 10, 200)
    full = store.used_bytes()
    assert full > 128 * KIB
    live = [r["id"] for r in store.load().live_jobs]
    apply(store, *(delete(job_id) for job_id in live))
    assert store.used_bytes() < full // 4
    assert _fill(store, "b", 10, 200) >= applied * 3 // 4  # nearly all of it again
    assert store.used_bytes() > full // 2
    store.close()


# --- dependency outcome rows --------------------------------------------------------


def test_dep_outcomes_round_trip_and_overwrite(store: Storage) -> None:
    parent = rec("p", state="waiting-children")
    apply(store, put(parent), put(rec("c1", state="active")), put(rec("c2", state="active")))
    # each child's row commits with its own finish, as the broker writes them
    apply(
        store,
        finish(rec("c1", state="completed"), {"v": 1}),
        dep("p", "c1", {"r": {"v": 1}, "n": 2**70}),  # beyond 64 bits: the CBOR fallback
        finish(rec("c2", state="failed")),
        dep("p", "c2", {"failed": "boom", "policy": "ignore", "b": b"\x00"}),
    )
    assert store.dep_outcomes("p") == {
        "c1": {"r": {"v": 1}, "n": 2**70},
        "c2": {"failed": "boom", "policy": "ignore", "b": b"\x00"},
    }
    apply(store, dep("p", "c1", {"r": "second"}))  # same (parent, child): overwritten
    got = store.dep_outcomes("p")
    assert got == {
        "c1": {"r": "second"},
        "c2": {"failed": "boom", "policy": "ignore", "b": b"\x00"},
    }
    got["c1"]["r"] = "mutated"  # reads are fresh copies
    assert store.dep_outcomes("p")["c1"] == {"r": "second"}
    # rows are keyed by parent only: the children's and parent's records are untouched
    assert ids(store.load().live_jobs) == ["p"]
    assert store.get_result("c1") == (True, {"v": 1})
    # parents without rows, and ids that could never be stored, read as empty
    for parent_id in ("c1", "nobody", "", "x" * 600, "\u20ac" * 170):
        assert store.dep_outcomes(parent_id) == {}


def test_dep_outcome_written_by_the_writes_method() -> None:
    w = Writes()
    outcome = {"r": 1}
    w.put_dep_outcome("p", "c", outcome)
    assert w.ops == [PutDepOutcome("p", "c", outcome)]


def test_deleting_the_parent_deletes_only_its_rows(store: Storage) -> None:
    apply(
        store,
        dep("p", "c1", {"r": 1}),
        dep("p", "c2", {"r": 2}),
        dep("q", "c1", {"r": 3}),  # c1 is a child of both p and q
        dep("c1", "g", {"r": 4}),  # and a parent itself
        dep("p1", "x", {"r": 5}),  # a parent whose id extends "p"
    )
    apply(store, delete("p"))
    assert store.dep_outcomes("p") == {}
    assert store.dep_outcomes("q") == {"c1": {"r": 3}}
    assert store.dep_outcomes("p1") == {"x": {"r": 5}}
    # deleting c1 drops its rows as a parent, never the rows where it is the child
    apply(store, delete("c1"))
    assert store.dep_outcomes("c1") == {}
    assert store.dep_outcomes("q") == {"c1": {"r": 3}}
    # in one apply, ops run in order: a row put after the delete stays, one before goes
    apply(store, dep("q", "c0", {"r": 6}), delete("q"), dep("q", "c9", {"r": 7}))
    assert store.dep_outcomes("q") == {"c9": {"r": 7}}
    apply(store, delete("q"), delete("q"), delete("never-had-rows"))
    assert store.dep_outcomes("q") == {}
    assert store.dep_outcomes("p1") == {"x": {"r": 5}}


def test_deleting_the_parent_record_deletes_rows_wherever_it_is(store: Storage) -> None:
    apply(store, put(rec("live-p", state="waiting-children")), dep("live-p", "c", {"r": 1}))
    apply(store, finish(rec("done-p", state="completed"), "res"), dep("done-p", "c", {"r": 2}))
    apply(store, delete("live-p"), delete("done-p"))
    assert store.dep_outcomes("live-p") == {}
    assert store.dep_outcomes("done-p") == {}
    assert store.load() == Recovered()


def test_finishing_or_reputting_the_parent_keeps_its_rows(store: Storage) -> None:
    apply(store, put(rec("p", state="waiting-children")), dep("p", "c", {"r": 1}))
    apply(store, put(rec("p", state="queued")))  # all children done: the parent moves on
    apply(store, put(rec("p", state="active")))
    assert store.dep_outcomes("p") == {"c": {"r": 1}}
    apply(store, finish(rec("p", state="completed"), "parent-result"))
    assert store.dep_outcomes("p") == {"c": {"r": 1}}
    apply(store, finish(rec("p", state="failed", created=3)))  # a re-finish keeps them too
    assert store.dep_outcomes("p") == {"c": {"r": 1}}


def test_dep_keys_keep_parents_apart(store: Storage) -> None:
    # Without the length prefix, ("a", "1x") and ("a1", "x") would be the same key, and
    # parent "a"'s range would hold parent "a1"'s rows.
    apply(store, dep("a", "1x", {"who": "a"}), dep("a1", "x", {"who": "a1"}))
    assert store.dep_outcomes("a") == {"1x": {"who": "a"}}
    assert store.dep_outcomes("a1") == {"x": {"who": "a1"}}
    apply(store, delete("a"))
    assert store.dep_outcomes("a1") == {"x": {"who": "a1"}}
    # any Unicode, NUL included, on either side; children come in code point order
    odd = ["\x00", "a\x00", "a\x00b", "é", "\U0001f600", "z\x00\x00"]
    apply(store, *(dep(p, c, {"p": p, "c": c}) for p in odd for c in odd))
    for p in odd:
        got = store.dep_outcomes(p)
        assert list(got) == sorted(odd)
        assert all(got[c] == {"p": p, "c": c} for c in odd)
    apply(store, delete("a\x00"))
    assert store.dep_outcomes("a\x00") == {}
    assert all(len(store.dep_outcomes(p)) == len(odd) for p in odd if p != "a\x00")


def test_dep_key_limits(store: Storage) -> None:
    only_key_value(store, "an outcome row's parent and child ids are two columns, no "
                          "511-byte key")
    apply(store, put(rec("keep")), dep("keep", "c", {"r": 0}))
    # 400 + 120 bytes of ids: over LMDB's 511-byte keys; nothing of the call is applied
    with pytest.raises(ValueError, match="511"):
        apply(store, delete("keep"), dep("p", "c", {"r": 1}), dep("é" * 200, "é" * 60, {}))
    with pytest.raises(ValueError):
        apply(store, delete("keep"), dep("p", "", {}))
    with pytest.raises(ValueError):
        apply(store, delete("keep"), dep("", "c", {}))
    with pytest.raises(ValueError, match="dict"):
        apply(store, delete("keep"), dep("p", "c", ["not", "a", "map"]))  # type: ignore[arg-type]
    assert ids(store.load().live_jobs) == ["keep"]
    assert store.dep_outcomes("keep") == {"c": {"r": 0}}
    assert store.dep_outcomes("p") == {}
    # the ids may share exactly K.MAX_DEP_IDS_BYTES (509) bytes
    assert K.MAX_DEP_IDS_BYTES == 509
    apply(store, dep("p" * 300, "c" * 209, {"r": 2}), dep("q" * 508, "c", {"r": 3}))
    with pytest.raises(ValueError):
        apply(store, dep("p" * 300, "c" * 210, {}))
    assert store.dep_outcomes("p" * 300) == {"c" * 209: {"r": 2}}
    assert store.dep_outcomes("q" * 508) == {"c": {"r": 3}}
    apply(store, delete("p" * 300), delete("q" * 508))
    assert store.dep_outcomes("p" * 300) == {}
    assert store.dep_outcomes("q" * 508) == {}
    # a parent id too long to own any row is still a job that can be deleted
    apply(store, put(rec("r" * 511)))
    apply(store, delete("r" * 511))
    assert store.dep_outcomes("r" * 511) == {}
    assert ids(store.load().live_jobs) == ["keep"]


def test_memory_max_bytes_leaves_no_dep_row() -> None:
    store = MemoryStorage(max_bytes=4_000)
    apply(store, dep("p", "c0", {"r": "x" * 100}))
    empty_size = MemoryStorage().size_bytes
    size = store.size_bytes
    assert size > empty_size
    big = [dep("q", f"c{i}", {"r": "y" * 500}) for i in range(10)]
    with pytest.raises(StorageFullError):
        apply(store, dep("p", "c0", {"r": "overwritten"}), dep("p", "c1", {}), *big)
    assert store.size_bytes == size
    assert store.dep_outcomes("p") == {"c0": {"r": "x" * 100}}
    assert store.dep_outcomes("q") == {}
    # a delete of the parent undone with the rest of the call brings its rows back
    with pytest.raises(StorageFullError):
        apply(store, delete("p"), dep("p", "c2", {}), *big)
    assert store.size_bytes == size
    assert store.dep_outcomes("p") == {"c0": {"r": "x" * 100}}
    apply(store, *big[:5])  # a smaller batch still fits
    apply(store, delete("p"), delete("q"))
    assert store.dep_outcomes("q") == {}
    assert store.size_bytes == empty_size  # rows are counted in and out exactly


def test_lmdb_full_map_leaves_no_dep_row(tmp_path: Any) -> None:
    store = LmdbStorage(tmp_path / "db", map_size_bytes=64 * KIB, max_map_size_bytes=64 * KIB)
    apply(store, dep("p", "c0", {"r": 0}))
    with pytest.raises(StorageFullError):
        apply(store, dep("p", "c1", {}), *(dep("q", f"c{i}", {"r": "y" * 900}) for i in range(80)))
    assert store.dep_outcomes("p") == {"c0": {"r": 0}}
    assert store.dep_outcomes("q") == {}
    store.close()


def test_lmdb_dep_rows_survive_reopen(tmp_path: Any) -> None:
    path = tmp_path / "db"
    store = LmdbStorage(path)
    apply(
        store,
        put(rec("p", state="waiting-children")),
        finish(rec("c1", state="completed"), 1),
        dep("p", "c1", {"r": 1}),
        dep("p", "é\x00", {"failed": "x"}),
    )
    store.sync()
    store.close()
    again = LmdbStorage(path)
    assert again.dep_outcomes("p") == {"c1": {"r": 1}, "é\x00": {"failed": "x"}}
    apply(again, delete("p"))
    again.close()
    again = LmdbStorage(path)
    assert again.dep_outcomes("p") == {}
    again.close()


def test_lmdb_opens_a_data_directory_without_deps(tmp_path: Any) -> None:
    path = tmp_path / "db"
    # the layout before dependency rows existed: same schema, no ``deps`` sub-database
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        dbs = {n: env.open_db(n, txn=txn) for n in K.ALL_DBS if n != K.DB_DEPS}
        txn.put(K.SCHEMA_KEY, K.encode_schema(K.SCHEMA_VERSION), db=dbs[K.DB_META])
        record = rec("old", data="kept")
        txn.put(K.job_key("old"), K.encode_value(record), db=dbs[K.DB_LIVE])
    with env.begin() as txn:
        assert txn.get(K.DB_DEPS) is None  # named dbs are keys of the main db
    env.close()
    store = LmdbStorage(path)
    assert store.load().live_jobs == [record]
    assert store.dep_outcomes("old") == {}
    apply(store, dep("old", "c", {"r": 1}))
    store.close()
    store = LmdbStorage(path)
    assert store.dep_outcomes("old") == {"c": {"r": 1}}
    store.close()


# --- model equivalence --------------------------------------------------------------


class Model:
    """The port's semantics, written as plainly as possible."""

    def __init__(self) -> None:
        self.live: dict[str, dict[str, Any]] = {}
        self.finished: dict[str, dict[str, Any]] = {}
        self.results: dict[str, Any] = {}
        self.meta: dict[str, dict[str, Any]] = {}
        self.deps: dict[tuple[str, str], dict[str, Any]] = {}

    def apply(self, calls: list[tuple[Any, ...]]) -> None:
        for name, *args in calls:
            if name == "put_job":
                self.live[args[0]["id"]] = args[0]
            elif name == "finish_job":
                r, has_result, result = args
                self.live.pop(r["id"], None)
                self.finished[r["id"]] = r
                if has_result:
                    self.results[r["id"]] = result
                else:
                    self.results.pop(r["id"], None)
            elif name == "delete_job":
                for table in (self.live, self.finished, self.results):
                    table.pop(args[0], None)
                for parent, child in list(self.deps):
                    if parent == args[0]:
                        del self.deps[parent, child]
            elif name == "put_dep_outcome":
                self.deps[args[0], args[1]] = args[2]
            else:
                self.meta[args[0]] = args[1]

    def load(self) -> Recovered:
        counts = Counter((r["queue"], r["state"]) for r in self.finished.values())
        return Recovered(
            live_jobs=[self.live[k] for k in sorted(self.live)],
            queue_meta=dict(sorted(self.meta.items())),
            finished_counts=dict(sorted(counts.items())),
        )

    def ordered(self, queue: str, state: str) -> list[dict[str, Any]]:
        rs = [r for r in self.finished.values() if (r["queue"], r["state"]) == (queue, state)]
        return sorted(rs, key=lambda r: (r["createdAt"], r["id"]))

    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        rows = {c: o for (p, c), o in self.deps.items() if p == parent_id}
        return dict(sorted(rows.items()))


JOB_IDS = ["a", "b", "c", "a1", "é", "\U0001f600", "z\x00z", "0"]
QUEUES = ["q", "q2", "q-"]
json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
created = st.sampled_from([-(2**62), -5, -1, 0, 1, 5, 4_320_000_000_000_000])


@st.composite
def job_records(draw: st.DrawFn, states: list[str]) -> dict[str, Any]:
    return rec(
        draw(st.sampled_from(JOB_IDS)),
        queue=draw(st.sampled_from(QUEUES)),
        state=draw(st.sampled_from(states)),
        created=draw(created),
        data=draw(json_like),
    )


op_calls = st.one_of(
    job_records(["queued", "active", "waiting-children"]).map(put),
    st.tuples(job_records(["completed", "failed"]), st.booleans(), json_like).map(
        lambda t: ("finish_job", t[0], t[1], t[2] if t[1] else None)
    ),
    st.sampled_from(JOB_IDS).map(delete),
    st.tuples(st.sampled_from(QUEUES), st.dictionaries(st.text(max_size=3), json_like)).map(
        lambda t: meta(*t)
    ),
    st.tuples(
        st.sampled_from(JOB_IDS),
        st.sampled_from(JOB_IDS),
        st.dictionaries(st.text(max_size=3), json_like, max_size=3),
    ).map(lambda t: dep(*t)),
)
applies = st.lists(st.lists(st.lists(op_calls, max_size=6), min_size=1, max_size=3), max_size=8)


def _observe(store: Storage | Model) -> Any:
    if isinstance(store, Model):
        lists = {
            (q, s, asc, off, lim): (o if asc else o[::-1])[off : off + lim]
            for q in QUEUES
            for s in ("completed", "failed")
            for o in [store.ordered(q, s)]
            for asc in (True, False)
            for off, lim in ((0, 100), (1, 2), (3, 1))
        }
        id_lists = {
            (q, s): [r["id"] for r in store.ordered(q, s)]
            for q in QUEUES
            for s in ("completed", "failed")
        }
        finished = {i: store.finished.get(i) for i in JOB_IDS}
        results = {i: (i in store.results, store.results.get(i)) for i in JOB_IDS}
    else:
        lists = {
            (q, s, asc, off, lim): store.list_finished(q, s, asc=asc, offset=off, limit=lim)
            for q in QUEUES
            for s in ("completed", "failed")
            for asc in (True, False)
            for off, lim in ((0, 100), (1, 2), (3, 1))
        }
        id_lists = {
            (q, s): list(store.iter_finished_ids(q, s))
            for q in QUEUES
            for s in ("completed", "failed")
        }
        finished = {i: store.get_finished(i) for i in JOB_IDS}
        results = {i: store.get_result(i) for i in JOB_IDS}
    # as item lists, so the children's order is compared too
    deps = {p: list(store.dep_outcomes(p).items()) for p in JOB_IDS}
    return store.load(), lists, id_lists, finished, results, deps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(applies)
def test_adapters_match_the_model(calls_per_apply: list[list[list[tuple[Any, ...]]]]) -> None:
    model = Model()
    memory = MemoryStorage()
    with tempfile.TemporaryDirectory() as tmp:
        lmdb_store = LmdbStorage(tmp, map_size_bytes=256 * KIB)
        try:
            for batches in calls_per_apply:
                ws = [writes(*calls) for calls in batches]
                memory.apply(ws)
                lmdb_store.apply(ws)
                model.apply([c for calls in batches for c in calls])
                expected = _observe(model)
                assert _observe(memory) == expected
                assert _observe(lmdb_store) == expected
        finally:
            lmdb_store.close()


def test_count_finished_follows_finish_and_delete(store: Storage) -> None:
    apply(store, *(finish(rec(f"j{i}", "cq", "completed")) for i in range(3)))
    assert store.count_finished("cq", "completed") == 3
    assert store.count_finished("cq", "failed") == 0
    assert store.count_finished("unknown-queue", "completed") == 0
    apply(store, delete("j1"))
    assert store.count_finished("cq", "completed") == 2


def test_values_beyond_64_bit_ints_round_trip(store: Storage) -> None:
    # msgpack cannot hold them; the value codec falls back to CBOR for that record
    big = rec("big", data={"n": 2**70, "m": -(2**80)})
    apply(store, put(big), finish(rec("done", state="completed"), {"r": 2**65}))
    assert store.load().live_jobs[0]["data"] == {"n": 2**70, "m": -(2**80)}
    assert store.get_result("done") == (True, {"r": 2**65})


def test_the_broker_refuses_dependency_pairs_storage_cannot_key() -> None:
    from trioqueue.core import fields

    assert fields.MAX_DEP_PAIR_BYTES == K.MAX_DEP_IDS_BYTES


def test_the_shells_id_pages_stay_in_their_queue() -> None:
    from trioqueue.core.queue.finished import IDS
    from trioqueue.storage.reads import fetch

    store = MemoryStorage()
    apply(store, finish(rec("a", state="completed", created=1)),
          finish(rec("b", queue="q2", state="completed", created=1)))
    ids, after = fetch(store, "q", (IDS, "completed", None, 5))
    assert ids == ["a"] and after is None
