"""The store checker passes a store the broker wrote and finds what a torn write leaves."""

from __future__ import annotations

from pathlib import Path

import lmdb

from trioqueue.core.writes import Writes
from trioqueue.storage import keys as K
from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.testing.store_check import check_lmdb_store


def record(job_id: str, state: str, queue: str = "q") -> dict[str, object]:
    return {"id": job_id, "queue": queue, "name": "n", "data": None, "createdAt": 5,
            "runAt": 5, "state": state, "seq": 1}


def written(path: Path) -> None:
    store = LmdbStorage(path)
    writes = Writes()
    writes.put_job(record("live", "queued"))
    writes.finish_job(record("done", "completed"), True, 42)
    writes.finish_job(record("dead", "failed"), False)
    writes.put_dep_outcome("live", "done", {"kind": "completed"})
    store.apply([writes])
    store.close()


def test_a_store_the_broker_wrote_is_consistent(tmp_path: Path) -> None:
    written(tmp_path)
    assert check_lmdb_store(tmp_path) == []


def test_torn_writes_are_found(tmp_path: Path) -> None:
    written(tmp_path)
    env = lmdb.open(str(tmp_path), max_dbs=16)
    with env.begin(write=True) as txn:
        finished = env.open_db(K.DB_FINISHED, txn=txn)
        idx = env.open_db(K.DB_FINISHED_IDX, txn=txn)
        live = env.open_db(K.DB_LIVE, txn=txn)
        results = env.open_db(K.DB_RESULTS, txn=txn)
        deps = env.open_db(K.DB_DEPS, txn=txn)
        # a finished record whose index entry never made it
        txn.put(b"orphan", K.encode_value(record("orphan", "completed")), db=finished)
        # a job both live and finished, an index entry of nothing, a stray result
        txn.put(b"done", K.encode_value(record("done", "active")), db=live)
        prefix = K.finished_prefix("q", "failed")
        txn.put(K.finished_idx_key(prefix, 9, b"ghost"), b"", db=idx)
        txn.put(b"dead", K.encode_result(1), db=results)
        txn.put(K.dep_key("gone", "x"), K.encode_value({"kind": "completed"}), db=deps)
    env.close()
    problems = check_lmdb_store(tmp_path)
    assert "b'done' is both live and finished" in problems
    assert any("has no index entry" in p and "orphan" in p for p in problems)
    assert any("points at no finished record" in p for p in problems)
    assert any(p.startswith("count of") for p in problems)  # the counts disagree now
    assert "result stored for b'dead', which is not a completed job" in problems
    assert "dependency row 'gone' <- 'x' of a job that is gone" in problems
