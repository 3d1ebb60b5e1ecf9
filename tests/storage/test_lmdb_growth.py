"""The LMDB store's cheap bound of its used bytes (storage/lmdb/growth.py): an upper
bound of the file's high-water mark at every commit, asked of LMDB now and then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trioqueue.core.job import JobRecord
from trioqueue.core.writes import Writes
from trioqueue.storage.lmdb.store import LmdbStorage

T0 = 1_764_000_000_000


def record(n: int, size: int) -> dict[str, Any]:
    return JobRecord(id=f"01a2{n:08x}-7000-8000-{n:012x}", queue="q", state="queued",
                     created_at=T0 + n, data={"pad": "d" * size}).to_record()


def put(store: LmdbStorage, records: list[dict[str, Any]], *, finish: bool = False) -> None:
    w = Writes()
    for r in records:
        if finish:
            w.finish_job({**r, "state": "completed"}, True, {"summary": "r" * 100})
        else:
            w.put_job(r)
    store.apply([w])


def true_mark(store: LmdbStorage) -> int:
    return (store._env.info()["last_pgno"] + 1) * store._psize


@pytest.mark.parametrize("size", [100, 3_000, 20_000])
def test_the_bound_is_never_below_the_file_and_rarely_asks_lmdb(
    tmp_path: Path, size: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = LmdbStorage(tmp_path / "db", map_size_bytes=1 << 30)
    asked = []
    measure = store._mark._measure
    monkeypatch.setattr(store._mark, "_measure", lambda: asked.append(1) or measure())
    records = [record(n, size) for n in range(600)]
    for n, r in enumerate(records):  # one commit a job, as sequential PUSHes are
        put(store, [r])
        assert store.used_bytes_bound() >= true_mark(store) >= store.used_bytes()
        if n % 50 == 49:  # and pulls: records rewritten in place, a little larger
            put(store, [{**x, "state": "active", "attempts": 1} for x in records[n - 49:n + 1]])
            assert store.used_bytes_bound() >= true_mark(store)
    # Asked once per remeasure_bytes of slack: far fewer times than commits (612).
    assert len(asked) < 612 / 4, len(asked)
    store.close()


def test_a_finish_or_delete_measures_again(tmp_path: Path) -> None:
    store = LmdbStorage(tmp_path / "db", map_size_bytes=1 << 30)
    records = [record(n, 500) for n in range(200)]
    put(store, records)
    store.used_bytes_bound()
    put(store, records[:150], finish=True)  # finished records land in other trees
    assert store._mark._mark is None  # not bounded by the puts' rule: measured again
    assert store.used_bytes_bound() == true_mark(store)
    store.close()


def test_a_small_store_is_measured_at_every_admission(tmp_path: Path) -> None:
    # Slack past a 64th of the maximum would make admission take the exact figure
    # (a read transaction and a stat per database) far from full: so a small store's
    # slack after one commit is already over its bound, and LMDB is asked each time.
    store = LmdbStorage(tmp_path / "db", map_size_bytes=8 << 20, max_map_size_bytes=8 << 20)
    for n in range(20):
        put(store, [record(n, 200)])
        assert store.used_bytes_bound() == true_mark(store)
    store.close()
