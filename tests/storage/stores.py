"""The storage tests' one way to get a store of each adapter (a fixture per file, each
with the map size its tests need)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trioqueue.storage.lmdb_store import LmdbStorage
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Storage

MIB = 1024 * 1024


def store_fixture(map_size_bytes: int) -> Callable[..., Iterator[Storage]]:
    """A ``store`` fixture: a MemoryStorage, then an LmdbStorage of ``map_size_bytes``
    in the test's directory; closed after the test."""

    @pytest.fixture(params=["memory", "lmdb"])
    def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
        s: Storage = (MemoryStorage() if request.param == "memory"
                      else LmdbStorage(tmp_path / "db", map_size_bytes=map_size_bytes))
        yield s
        s.close()

    return store


__all__ = ["MIB", "store_fixture"]
