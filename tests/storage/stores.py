"""The storage tests' one way to get a store of each adapter (a fixture per file, each
with the map size its tests need)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Storage

MIB = 1024 * 1024


def store_fixture(map_size_bytes: int, *, postgres: bool = False
                  ) -> Callable[..., Iterator[Storage]]:
    """A ``store`` fixture: a MemoryStorage, then an LmdbStorage of ``map_size_bytes``
    in the test's directory, then (``postgres``) a PgStorage on a fresh database of
    the test PostgreSQL server (skipped, with the reason, without one); closed after
    the test."""

    @pytest.fixture(params=["memory", "lmdb", "postgres"] if postgres else ["memory", "lmdb"])
    def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
        s: Storage
        if request.param == "memory":
            s = MemoryStorage()
        elif request.param == "lmdb":
            s = LmdbStorage(tmp_path / "db", map_size_bytes=map_size_bytes)
        else:
            from trioqueue.storage.pg.store import PgStorage

            s = PgStorage(request.getfixturevalue("pg_dsn"), outage_s=5)
        yield s
        s.close()

    return store


def only_key_value(store: Storage, what: str) -> None:
    """Skip a test of the key-value layout (LMDB, memory) when ``store`` is PostgreSQL,
    saying which property it does not share (``what``)."""
    if type(store).__name__ == "PgStorage":
        pytest.skip(f"PostgreSQL's layout: {what}")


__all__ = ["MIB", "only_key_value", "store_fixture"]
