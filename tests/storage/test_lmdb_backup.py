"""copy_store: a compacted copy that LmdbStorage opens, and its refusals. (A copy taken
while a broker process writes is tested in tests/admin/test_backup.py: LMDB allows one
environment handle per process, so the live writer must be another process.)"""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from trioqueue.storage.lmdb.backup import DATA_FILE, BackupError, copy_store
from trioqueue.storage.lmdb.store import MAX_DBS, LmdbStorage


def _store_with_garbage(path: Path) -> None:
    """A store whose file holds 8 MB of freed pages beside 40 small records."""
    LmdbStorage(path).close()
    env = lmdb.open(str(path), max_dbs=MAX_DBS, subdir=True, map_size=64 << 20)
    scratch = env.open_db(b"scratch")
    with env.begin(write=True) as txn:
        for i in range(2000):
            txn.put(b"k%05d" % i, b"x" * 4096, db=scratch)
    with env.begin(write=True) as txn:
        for i in range(40, 2000):
            txn.delete(b"k%05d" % i, db=scratch)
    env.close()


def test_a_copy_is_compact_and_opens(tmp_path: Path) -> None:
    source, dest = tmp_path / "db", tmp_path / "backup" / "copy"
    _store_with_garbage(source)
    size = copy_store(source, dest)
    assert size == (dest / DATA_FILE).stat().st_size
    assert size * 10 < (source / DATA_FILE).stat().st_size
    env = lmdb.open(str(dest), max_dbs=MAX_DBS, subdir=True, readonly=True)
    with env.begin() as txn:
        rows = list(txn.cursor(db=env.open_db(b"scratch", txn=txn, create=False)))
    env.close()
    assert [key for key, _ in rows] == [b"k%05d" % i for i in range(40)]
    LmdbStorage(dest).close()  # the broker's own open accepts it


def test_refusals(tmp_path: Path) -> None:
    source = tmp_path / "db"
    LmdbStorage(source).close()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(BackupError, match="exists and is not an empty directory"):
        copy_store(source, tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "keep me"
    with pytest.raises(BackupError, match=r"no LMDB store at .* \(no data.mdb\)"):
        copy_store(tmp_path / "nothing", tmp_path / "out")
    with pytest.raises(BackupError, match="exists and is not an empty directory"):
        copy_store(source, source)
    assert not (tmp_path / "out").exists()


def test_an_empty_existing_directory_is_used(tmp_path: Path) -> None:
    source, dest = tmp_path / "db", tmp_path / "empty"
    LmdbStorage(source).close()
    dest.mkdir()
    assert copy_store(source, dest) > 0
