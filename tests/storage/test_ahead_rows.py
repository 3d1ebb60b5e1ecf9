"""Long data strings written ahead of their job (storage/lmdb/ahead.py, kept_data.py), on
both adapters: the record that carries the very string takes the pieces instead of
writing its data, reads put it back, and no piece outlives its job or a push that
never took it."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.job import JobRecord
from trioqueue.core.writes import Writes
from trioqueue.storage import encoding as E
from trioqueue.storage import keys as K
from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Storage, StorageFullError

from .stores import MIB, store_fixture

PIECE = 64 * 1024


def rec(job_id: str, state: str = "queued", **attrs: Any) -> dict[str, Any]:
    return JobRecord(id=job_id, queue="q", state=state, created_at=1, **attrs).to_record()


def apply(store: Storage, *calls: tuple[str, Any]) -> None:
    w = Writes()
    for name, *args in calls:
        getattr(w, name)(*args)
    store.apply([w])


def write_ahead(store: Storage, text: str, row_key: bytes = b"r" * 16) -> int:
    raw = text.encode()
    pieces = 0
    for start in range(0, len(raw), PIECE):
        store.write_ahead(row_key, pieces, raw[start:start + PIECE])
        pieces += 1
    store.expect_ahead(text, row_key, pieces)
    return pieces


def ahead_rows(store: Storage) -> int:
    if isinstance(store, MemoryStorage):
        return len(store._ahead) + len(store._claims)
    assert isinstance(store, LmdbStorage)
    with store._env.begin() as txn:
        return txn.stat(store._ahead)["entries"] + txn.stat(store._claims)["entries"]


store = store_fixture(16 * MIB)


def test_the_record_takes_the_pieces_and_reads_put_the_text_back(store: Storage) -> None:
    text = "ab€" * (5 * PIECE // 5)
    pieces = write_ahead(store, text)
    assert pieces > 2 and ahead_rows(store) == pieces
    apply(store, ("put_job", rec("a", data=text)))
    assert ahead_rows(store) == pieces + 1  # and its claim
    store.release_ahead(text)  # taken: nothing to drop
    assert ahead_rows(store) == pieces + 1
    assert store.load().live_jobs[0]["data"] == text
    apply(store, ("finish_job", rec("a", state="completed", data=text), False))
    got = store.get_finished("a")
    assert got is not None and got["data"] == text
    page = store.list_finished("q", "completed", asc=True, offset=0, limit=5)
    assert [r["data"] for r in page] == [text]
    apply(store, ("delete_job", "a"))
    assert ahead_rows(store) == 0


def test_a_pull_writes_neither_the_data_nor_the_pieces_again(store: Storage) -> None:
    text = "x" * (3 * PIECE)
    write_ahead(store, text)
    apply(store, ("put_job", rec("a", data=text)))
    w = Writes()
    w.put_job(rec("a", state="active", data=text))
    kept = store._kept  # type: ignore[attr-defined]
    ops = E.encode_ops(w.ops, kept)
    kept.discard()
    assert [op[0] for op in ops] == [E.OP_PUTS]
    assert K.decode_value(ops[0][1][0][1])["dataKept"][0] == "text"


def test_pieces_no_record_took_are_dropped_on_release(store: Storage) -> None:
    before = store.used_bytes()
    text = "y" * (2 * PIECE)
    write_ahead(store, text)
    assert store.used_bytes() > before
    store.release_ahead(text)  # the push was refused: no record took them
    assert ahead_rows(store) == 0
    # and a record with the same text afterwards writes it the ordinary way
    apply(store, ("put_job", rec("b", data=text)))
    assert ahead_rows(store) == 0 and store.load().live_jobs[0]["data"] == text


def test_new_data_drops_the_old_pieces(store: Storage) -> None:
    text = "z" * (2 * PIECE)
    write_ahead(store, text)
    apply(store, ("put_job", rec("a", data=text)))
    other = "w" * (2 * PIECE)  # UpdateData: a new object, written with the record
    apply(store, ("put_job", rec("a", data=other)))
    assert ahead_rows(store) == 0
    assert store.load().live_jobs[0]["data"] == other


def test_a_failed_commit_leaves_the_pieces_untaken() -> None:
    store = MemoryStorage(max_bytes=10 * PIECE)
    text = "q" * (4 * PIECE)
    write_ahead(store, text)
    store._max_bytes = store.used_bytes()  # the record itself does not fit
    with pytest.raises(StorageFullError):
        apply(store, ("put_job", rec("a", data=text)))
    store._max_bytes = None
    apply(store, ("put_job", rec("a", data=text)))  # taken now, by this commit
    store.release_ahead(text)
    assert store.load().live_jobs[0]["data"] == text


def test_pieces_of_a_push_cut_by_a_crash_are_swept_when_the_store_opens(tmp_path: Any
                                                                        ) -> None:
    path = tmp_path / "db"
    s = LmdbStorage(path, map_size_bytes=16 * MIB)
    kept_text = "k" * (2 * PIECE)
    write_ahead(s, kept_text, b"k" * 16)
    apply(s, ("put_job", rec("a", data=kept_text)))
    write_ahead(s, "o" * (3 * PIECE), b"o" * 16)  # never taken: the broker dies here
    s.close()
    s = LmdbStorage(path, map_size_bytes=16 * MIB)
    assert ahead_rows(s) == 2 + 1  # the taken pieces and their claim, no other
    assert s.load().live_jobs[0]["data"] == kept_text
    s.close()


def test_a_full_map_refuses_a_piece_and_writes_nothing(tmp_path: Any) -> None:
    s = LmdbStorage(tmp_path / "db", map_size_bytes=1 * MIB, max_map_size_bytes=1 * MIB)
    with pytest.raises(StorageFullError):
        for index in range(64):
            s.write_ahead(b"f" * 16, index, b"f" * PIECE)
    written = ahead_rows(s)
    s.drop_ahead_pieces(b"f" * 16, 64)
    assert written > 0 and ahead_rows(s) == 0
    apply(s, ("put_job", rec("a", data={"small": 1})))  # the store still works
    s.close()
