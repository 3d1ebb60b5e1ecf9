"""What an LMDB store's pages hold, and what its live jobs may still need: the figures
admission refuses new jobs by (see ``Broker.storage_room`` and docs/durability.md).

A mixin of :class:`~trioqueue.storage.lmdb_store.LmdbStorage`, which owns the
environment, its lock and the high-water mark these read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import lmdb

from .lmdb_growth import HighWaterMark
from .port import Space

_META_PAGES = 2  # LMDB's two meta pages, in use in every environment
# How much a live page may grow while its jobs are pulled and finished, in the worst
# case, as a multiple of the page: a pull rewrites a record a little larger, so a page
# packed full by a run of pushes splits in two (x2 while the jobs are active); the
# finished copies go into B-trees that page splits in the middle may leave half full
# (x2 again), and a live page is freed only when its last job has left it. So a live
# page's jobs may need up to 3 more pages before the store is back to its size.
# Measured (1 KB jobs pulled 50 at a time): live pages held 2 records, finished pages
# about 1.1: finishing cost about 1.9 KB of pages per job before this reserve existed.
_FINISH_PAGE_FACTOR = 3
# What finishing one job adds beside its record, before page slack: index entry,
# result key and node headers (the allowance is doubled for half-full pages).
_FINISH_JOB_BYTES = 128
# A lower bound of the bytes one live record takes in a page: a node's header (8) and
# pointer (2), a one-letter key, and the smallest record (only fields with values are
# stored: about 70 bytes; checked in tests/storage/test_space.py). So a page count
# bounds the number of live jobs, for the cheap bound of space_bound.
MIN_LIVE_NODE_BYTES = 64


class LmdbSpace:
    """``space``, ``space_bound``, ``finish_bytes`` and ``used_bytes`` of the port."""

    _env: lmdb.Environment
    _lock: threading.Lock
    _mark: HighWaterMark
    _psize: int
    _live: Any  # the live jobs' database handle
    _space_dbs: tuple[Any, ...]
    _read: Callable[[], AbstractContextManager[lmdb.Transaction[bytes]]]
    _check_open: Callable[[], None]

    def used_bytes(self) -> int:
        """Bytes of the pages in use by the B-trees of the last commit, meta pages
        included (about 8 us: one read transaction, one stat per database)."""
        return self.space().used_bytes

    def space(self) -> Space:
        """Pages in use, and those of the live jobs, from one read transaction."""
        self._check_open()
        pages = _META_PAGES
        with self._read() as txn:
            stat = txn.stat
            for db in self._space_dbs:
                s = stat(db)
                pages += s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]
            live = stat(self._live)
        live_pages = live["branch_pages"] + live["leaf_pages"] + live["overflow_pages"]
        return Space(pages * self._psize, live_pages * self._psize, live["entries"])

    def space_bound(self) -> Space:
        """Bounds from the file's high-water mark alone (one ``env.info()``)."""
        bound = self.used_bytes_bound()
        return Space(bound, bound, bound // MIN_LIVE_NODE_BYTES)

    def finish_bytes(self, live_bytes: int, live_jobs: int, allowance_bytes: int) -> int:
        """Up to three more pages per live page (see _FINISH_PAGE_FACTOR) and, per job,
        its allowance and index entry twice over (pages half full)."""
        return (_FINISH_PAGE_FACTOR * live_bytes
                + 2 * live_jobs * (allowance_bytes + _FINISH_JOB_BYTES))

    def used_bytes_bound(self) -> int:
        """An upper bound of the file's high-water mark (highest page ever used), so of
        :meth:`used_bytes`, mostly without a call to LMDB (lmdb_growth.py). It never
        goes down: once a store was nearly full, callers take the exact figure."""
        self._check_open()
        with self._lock:
            return self._mark.bound()

    def _measure_mark(self) -> int:
        return (self._env.info()["last_pgno"] + 1) * self._psize
