"""Large job data kept apart from its record (storage/kept_data.py), on both adapters:
read back whole everywhere a record is read, written once however often the record is
rewritten, deleted with the job, and a failed write never leaves data marked stored."""

from __future__ import annotations

from typing import Any

import lmdb
import pytest

from trioqueue.core import native
from trioqueue.core.job import JobRecord
from trioqueue.core.writes import Writes
from trioqueue.storage import encoding as E
from trioqueue.storage import keys as K
from trioqueue.storage.kept_data import KEEP_DATA_BYTES, KEPT_FIELD, KeptData
from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Storage, StorageFullError
from trioqueue.storage.value_pieces import Packed, PackedRecords

from .stores import MIB, store_fixture


def rec(job_id: str, state: str = "queued", **attrs: Any) -> dict[str, Any]:
    return JobRecord(id=job_id, queue="q", state=state, created_at=1, **attrs).to_record()


def big(tag: str = "x") -> dict[str, Any]:
    return {"blob": tag * KEEP_DATA_BYTES, "n": 1}


def put(store: Storage, *records: dict[str, Any]) -> None:
    w = Writes()
    for r in records:
        w.put_job(r)
    store.apply([w])


store = store_fixture(8 * MIB)


def data_ops(ops: list[tuple[Any, ...]]) -> list[bytes]:
    return [op[1] for op in ops if op[0] == E.OP_DATA]


def test_a_large_record_keeps_its_data_apart_and_writes_it_once() -> None:
    kept = KeptData()
    data = big()
    queued = rec("a", data=data)
    w = Writes()
    w.put_job(queued)
    first = E.encode_ops(w.ops, kept)
    kept.settle()
    assert data_ops(first) == [b"a"]
    record_value = first[-1][1][0][1]
    assert len(record_value) < 1024 and K.decode_value(record_value)[KEPT_FIELD] is True
    # pulled: the same data object, a new state; the record alone is written
    w = Writes()
    w.put_job(rec("a", state="active", data=data))
    again = E.encode_ops(w.ops, kept)
    kept.settle()
    assert data_ops(again) == []
    # new data (UpdateData gives a new object): written again, even if equal
    w = Writes()
    w.put_job(rec("a", state="active", data=dict(data)))
    assert data_ops(E.encode_ops(w.ops, kept)) == [b"a"]
    # new small data: written in the record, and the old data object not held any more
    kept.settle()
    w = Writes()
    w.put_job(rec("a", state="active", data={"small": 2}))
    small_again = E.encode_ops(w.ops, kept)
    kept.settle()
    assert data_ops(small_again) == [] and "a" not in kept.held
    assert K.decode_value(small_again[0][1][0][1])["data"] == {"small": 2}
    # a long string as the data: kept apart too (known large before it is encoded)
    w = Writes()
    w.put_job(rec("c", data="y" * KEEP_DATA_BYTES))
    text = E.encode_ops(w.ops, KeptData())
    where, row = K.decode_value(text[-1][1][0][1])[KEPT_FIELD], text[0][2]
    assert data_ops(text) == [b"c"]
    if native.PURE_PYTHON:  # no view of the string's own bytes: its row is encoded
        assert where is True and K.decode_value(row) == {"d": "y" * KEEP_DATA_BYTES}
    else:  # the string's own UTF-8 bytes, not an encoding of them
        assert where == "text"
        assert isinstance(row, memoryview) and bytes(row) == b"y" * KEEP_DATA_BYTES
    # a small record is written whole, with no data row
    w = Writes()
    w.put_job(rec("b", data={"small": 1}))
    small = E.encode_ops(w.ops, KeptData())
    assert data_ops(small) == [] and K.decode_value(small[0][1][0][1])["data"] == {"small": 1}


@pytest.mark.parametrize("data", [big(), "é" * KEEP_DATA_BYTES], ids=["map", "text"])
def test_kept_data_is_read_back_everywhere(store: Storage, data: Any) -> None:
    put(store, rec("a", data=data), rec("b", data={"s": 1}))
    assert [r["data"] for r in store.load().live_jobs] == [data, {"s": 1}]
    w = Writes()
    w.finish_job(rec("a", state="completed", data=data), True, "r")
    store.apply([w])
    got = store.get_finished("a")
    assert got is not None and got["data"] == data and KEPT_FIELD not in got
    page = store.list_finished("q", "completed", asc=True, offset=0, limit=10)
    assert [r["data"] for r in page] == [data]


def test_deleting_a_job_deletes_its_data(store: Storage) -> None:
    put(store, rec("keep", data={"s": 1}))
    before = store.used_bytes()
    put(store, rec("a", data=big()))
    assert store.used_bytes() >= before + KEEP_DATA_BYTES
    w = Writes()
    w.delete_job("a")
    store.apply([w])
    if isinstance(store, MemoryStorage):
        assert store.used_bytes() == before
    else:  # LMDB: pages, and the data's overflow pages are gone with it
        assert store.used_bytes() < before + KEEP_DATA_BYTES // 2
    # the same id again, with new data: stored and read back
    put(store, rec("a", data=big("y")))
    assert store.load().live_jobs[0]["data"] == big("y")


def test_a_failed_write_does_not_count_the_data_as_stored() -> None:
    store = MemoryStorage(max_bytes=KEEP_DATA_BYTES // 2)
    data = big()
    with pytest.raises(StorageFullError):
        put(store, rec("a", data=data))
    store._max_bytes = None  # room now: the same job and data object again
    put(store, rec("a", state="active", data=data))
    assert store.load().live_jobs[0]["data"] == data


@pytest.mark.parametrize("data", [big(), "€" * KEEP_DATA_BYTES], ids=["map", "text"])
def test_kept_data_survives_a_reopen_and_is_not_rewritten(tmp_path: Any, data: Any) -> None:
    path = tmp_path / "db"
    s = LmdbStorage(path, map_size_bytes=8 * MIB)
    put(s, rec("a", data=data))
    s.close()
    s = LmdbStorage(path, map_size_bytes=8 * MIB)
    loaded = s.load().live_jobs[0]
    assert loaded["data"] == data
    # the recovered record's data object is held as stored: a pull writes no data
    w = Writes()
    w.put_job(rec("a", state="active", data=loaded["data"]))
    assert data_ops(E.encode_ops(w.ops, s._kept)) == []
    s.close()


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_store_opens_and_is_raised_to_4(tmp_path: Any, version: int) -> None:
    """4: progress messages and children's results for their parents kept apart, which
    a trioqueue reading 2 and 3 only would not find: it refuses the store."""
    path = tmp_path / "db"
    s = LmdbStorage(path)
    put(s, rec("a", data={"s": 1}))
    s.close()
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        db = env.open_db(K.DB_META, txn=txn)
        txn.put(K.SCHEMA_KEY, K.encode_schema(version), db=db)
    env.close()
    s = LmdbStorage(path)
    assert s.load().live_jobs[0]["data"] == {"s": 1}
    s.close()
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin() as txn:
        raw = txn.get(K.SCHEMA_KEY, db=env.open_db(K.DB_META, txn=txn))
    env.close()
    assert raw is not None and K.decode_schema(raw) == 4


def _ahead_pieces(store: Storage) -> int:
    if isinstance(store, MemoryStorage):
        return len(store._ahead)
    assert isinstance(store, LmdbStorage)
    with store._env.begin() as txn:
        return int(txn.stat(store._ahead)["entries"])


def test_a_childs_result_written_ahead_is_claimed_by_its_outcome_row(store: Storage) -> None:
    """The outcome row takes the pieces (kept_outcomes.py): read back whole, replaced
    by a later row of the pair, deleted with the parent."""
    result = [{"a": i} for i in range(20_000)]
    row = K.encode_result(result)
    outcome = {"kind": "completed", "queue": "q", "result": result}
    for parent in ("p1", "p2"):
        store.write_ahead(parent.encode() * 8, 0, row[3:100])
        store.write_ahead(parent.encode() * 8, 1, row[100:])
        store.expect_outcome(result, parent.encode() * 8, 2)
        w = Writes()
        w.put_dep_outcome(parent, "c", outcome)
        store.apply([w])
        store.release_outcome(result)  # (taken: a no-op)
        assert store.dep_outcomes(parent) == {"c": outcome}
    assert _ahead_pieces(store) == 4
    w = Writes()
    w.put_dep_outcome("p1", "c", {"kind": "detached"})  # (the pair's row again)
    w.delete_job("p2")
    store.apply([w])
    assert store.dep_outcomes("p1") == {"c": {"kind": "detached"}}
    assert store.dep_outcomes("p2") == {}
    assert _ahead_pieces(store) == 0


def _finished_listing(store: Storage, datas: list[Any]) -> None:
    w = Writes()
    for i, data in enumerate(datas):
        w.finish_job(rec(f"j{i:03}", state="completed", data=data), False)
    store.apply([w])


def _decoded_page(page: Any) -> list[dict[str, Any]]:
    """What the queue's actor makes of a packed page (store_reads.py), in one go."""
    if type(page) is PackedRecords:
        page = [page.put_back(K.decode_value(raw)) for raw in page.raws]
    for record in page:
        if type(record.get("data")) is Packed:
            record["data"] = K.decode_value(record["data"].raw)["d"]
    return list(page)


def test_a_listing_of_records_holding_many_values_comes_undecoded(store: Storage) -> None:
    # records of 8,000 integers each hold their data (under KEEP_DATA_BYTES); a page of
    # 250 was decoded in one call; one whose data is kept apart comes with it encoded
    inline = [[i % 100] * 8000 for i in range(40)]
    _finished_listing(store, [*inline, {"rows": [7] * KEEP_DATA_BYTES}, [7] * 40_000])
    whole = store.list_finished("q", "completed", asc=True, offset=0, limit=100)
    page = store.list_finished_packed("q", "completed", asc=True, offset=0, limit=100)
    assert type(page) is PackedRecords
    assert all(len(raw) < 16 * 1024 for raw in page.raws[:40])
    assert _decoded_page(page) == whole
    assert [r["data"] for r in whole[:40]] == inline
    # a small page is decoded at once, its data kept apart left encoded
    small = store.list_finished_packed("q", "completed", asc=True, offset=40, limit=1)
    assert type(small) is list and type(small[0]["data"]) is Packed
    assert _decoded_page(small) == whole[40:41]
