"""FaultyStorage fails and fills exactly as told (a broker on it, stopping at the failed
commit with exit status 3, is tests/faults/test_crashes.py)."""

from __future__ import annotations

import pytest

from trioqueue.core.writes import Writes
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import StorageFullError
from trioqueue.testing.faults import FaultyStorage, InjectedFault


def put(job_id: str) -> Writes:
    writes = Writes()
    writes.put_job({"id": job_id, "queue": "q", "name": "n", "data": None, "createdAt": 1,
                    "runAt": 1, "state": "queued", "seq": 1})
    return writes


def test_the_nth_commit_fails_and_nothing_of_it_is_applied() -> None:
    store = FaultyStorage(MemoryStorage(), fail_commit_at=2)
    store.apply([put("a")])
    with pytest.raises(InjectedFault, match="commit 2"):
        store.apply([put("b")])
    assert [r["id"] for r in store.load().live_jobs] == ["a"]
    store.apply([Writes()])  # an empty batch is not a commit
    assert store.commits == 2


def test_full_and_failing_fsync() -> None:
    store = FaultyStorage(MemoryStorage(), fail_sync_at=1)
    store.full = True
    with pytest.raises(StorageFullError):
        store.apply([put("a")])
    store.full = False
    store.apply([put("a")])
    with pytest.raises(InjectedFault, match="fsync 1"):
        store.sync()
    assert store.get_finished("a") is None and len(store.load().live_jobs) == 1


def test_declares_what_the_wrapped_store_declares_unless_told() -> None:
    class Remote(MemoryStorage):
        apply_blocks = True

    assert FaultyStorage(MemoryStorage()).apply_blocks is False
    assert FaultyStorage(Remote()).apply_blocks is True
    assert FaultyStorage(MemoryStorage(), apply_blocks=True).apply_blocks is True
    assert FaultyStorage(Remote(), apply_blocks=False).apply_blocks is False


def test_pages_of_finished_ids_go_through() -> None:
    inner = MemoryStorage()
    store = FaultyStorage(inner)
    writes = Writes()
    for i in range(3):
        writes.finish_job({"id": f"f{i}", "queue": "q", "name": "n", "data": None,
                           "createdAt": i, "state": "completed"}, False)
    store.apply([writes])
    first = store.finished_ids_page("q", "completed", after=None, limit=2)
    assert first.ids == ["f0", "f1"] and first.after == (1, "f1")
    rest = store.finished_ids_page("q", "completed", after=first.after, limit=2)
    assert rest.ids == ["f2"] and rest.after is None
    assert list(store.iter_finished_ids("q", "completed")) == ["f0", "f1", "f2"]
