"""The broker's own records (cron schedules, webhooks): stored, replaced, deleted and
loaded by both stores, atomically with the jobs of the same commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.port import Storage

from .test_storage import MIB, apply, put, rec, store  # noqa: F401 (store: a fixture)


def record(kind: str, name: str, value: dict[str, Any] | None) -> tuple[Any, ...]:
    return ("put_broker_record", kind, name, value)


def test_put_replace_delete_and_load(store: Storage) -> None:  # noqa: F811
    apply(store, record("cron", "nightly", {"executions": 1}),
          record("cron", "hourly", {"executions": 0}), record("webhook", "w1", {"url": "u"}))
    apply(store, record("cron", "nightly", {"executions": 2}),
          record("cron", "hourly", None), record("cron", "gone", None))
    assert store.load().broker_records == {"cron": {"nightly": {"executions": 2}},
                                           "webhook": {"w1": {"url": "u"}}}


def test_a_record_commits_with_the_jobs_of_its_batch(store: Storage) -> None:  # noqa: F811
    with pytest.raises(ValueError):  # the batch is refused whole: no record, no job
        apply(store, record("cron", "c", {"nextRun": 5}), put(rec("j1")),
              record("", "bad kind", {}))
    got = store.load()
    assert got.broker_records == {} and got.live_jobs == []
    apply(store, record("cron", "c", {"nextRun": 5}), put(rec("j1")))
    got = store.load()
    assert got.broker_records == {"cron": {"c": {"nextRun": 5}}}
    assert [r["id"] for r in got.live_jobs] == ["j1"]


@pytest.mark.parametrize("kind, name, value", [
    ("", "n", {}), ("a\x00b", "n", {}), ("cron", "", {}), ("cron", "n", [1]), (3, "n", {})])
def test_bad_records_are_refused(store: Storage, kind: Any, name: Any,  # noqa: F811
                                 value: Any) -> None:
    with pytest.raises(ValueError):
        apply(store, record(kind, name, value))


def test_records_survive_reopening_lmdb(tmp_path: Path) -> None:
    first = LmdbStorage(tmp_path / "db", map_size_bytes=MIB)
    apply(first, record("webhook", "w\u00e9", {"events": ["job.completed"]}))
    first.close()
    again = LmdbStorage(tmp_path / "db", map_size_bytes=MIB)
    try:
        assert again.load().broker_records == {"webhook": {"w\u00e9": {
            "events": ["job.completed"]}}}
    finally:
        again.close()
