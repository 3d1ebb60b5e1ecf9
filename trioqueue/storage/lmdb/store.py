"""The durable store: LMDB, one environment, a fixed handful of named sub-databases.

Key layouts are in :mod:`..keys`. Rules this adapter keeps:

* A write transaction begins and commits inside one :meth:`LmdbStorage.apply` call (or
  one ``write_ahead`` / ``drop_ahead_pieces`` call, :mod:`.ahead`), on one OS thread,
  never across an ``await``; reads use short read transactions and copy values out
  (no ``buffers=True``).
* ``sync=False`` by default: a commit is a few microseconds and a ``kill -9`` loses
  nothing committed (the page cache survives the process); :meth:`LmdbStorage.sync`
  flushes with ``env.sync(True)``. ``fsync_on_commit=True`` makes every commit durable.
  Between syncs an OS crash or power loss can lose the latest commits and, as LMDB's
  documentation of ``MDB_NOSYNC`` warns, can even corrupt the file.
* Never ``writemap`` (a full disk would SIGBUS the process instead of failing a write).
  A full disk then fails the commit with an ``lmdb.Error`` (ENOSPC or EIO) and nothing
  applied; the broker refuses new jobs before that, by :meth:`LmdbStorage.disk_bytes`.
* When the map is full the transaction is aborted, the map doubled (up to
  ``max_map_size_bytes``) and the whole batch retried; at the maximum, one no-op
  commit makes the pages freed by the previous commit reusable and the batch is tried
  once more, then :class:`~trioqueue.storage.port.StorageFullError` is raised with
  nothing applied. Deletes-only applies may use a small reserve above the maximum, so
  a full store can always be emptied. Resizing is allowed because the broker drives
  storage from a single thread and no transaction of this process is open then.
* :meth:`LmdbStorage.used_bytes` counts the pages of every B-tree (named databases and
  the main one) plus the two meta pages; pages a delete frees leave the trees at once,
  so they count as free from that commit on (they become reusable by LMDB from the
  commit after next, which the turn-over above takes care of). The free list's own
  pages and the copy-on-write pages of the next commit are not counted: that, and the
  pages a fragmented free list cannot offer as one contiguous run to a large value, is
  what the broker's reserve absorbs.
* Finished counts are kept exact in the same transaction as the writes, so
  :meth:`LmdbStorage.load` does not scan finished jobs.
* A page of finished jobs at any offset costs O(log n + page): the positions of every
  large (queue, state) range are kept in memory (:mod:`.finished`), built when the
  store opens (one walk of those ranges) and
  updated after each commit. So :meth:`LmdbStorage.apply` and the reads must run on
  one thread at a time (``apply_blocks`` is False: the writer commits inline).
* One broker per store: the store holds an OS lock on a file in its directory from open
  to close (:mod:`.owner`), and refuses to open while another process holds it.
* Deleting a job deletes its dependency outcome rows (its ``deps`` key range as a
  parent) with a cursor, in the same transaction, so no row outlives its parent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import lmdb

from ...core.large_values.graveyard import Graveyard
from ...core.writes import Writes
from .. import encoding as E
from .. import keys as K
from ..kept_data import PACKED_MIN_BYTES, KeptData, Row
from ..keyed_reads import KeyedFinishedReads
from ..ops import validate_writes
from ..port import FinishedCursor, FinishedPage, Recovered, Space, Storage, StorageFullError
from ..positions import BLOCK
from ..value_pieces import PackedRecords
from .ahead import AHEAD_PIECE_BYTES, AheadRows
from .finished import FinishedIndex, Moves
from .growth import HighWaterMark
from .owner import DirectoryOwner
from .reads import LmdbReads

_META_PAGES = 2  # LMDB's two meta pages, in use in every environment
_DATA_FILE = "data.mdb"  # LMDB's file of pages, in the environment's directory
# What pulling and finishing one live job may add to the store, measured (1,200 jobs
# of 50 B to 5 KB pushed in batches of 1 to 100, pulled 50 at a time or all at once,
# finished in order or shuffled, with a result, or dead-lettered with an error and
# stack trace, of 0 to 1 KB): at most 4,229 bytes a job with 1 KB of result or error,
# 3,615 with 300 B, 2,202 with none. Not a function of the record's size: a finished
# record larger than a live one frees the live one's pages. What it does cost is a page:
# the finished records go in roughly in key order, and LMDB splits a full page in the
# middle, so records of a third to a half of a page end up one to a page. So a job's
# claim is a page and its allowance, with a little for its index entry.
_FINISH_JOB_BYTES = 128
# A lower bound of the bytes one live record takes in a page: a node's header (8) and
# pointer (2), a one-letter key, and the smallest record (only fields with values are
# stored: about 70 bytes; checked in tests/storage/test_space.py). So a page count
# bounds the number of live jobs, for the cheap bound of space_bound.
MIN_LIVE_NODE_BYTES = 64
_INITIAL_MAP_BYTES = 1 << 30
# Named databases the environment may hold: len(K.ALL_DBS) is 9, room to add some
# without a bump. Another opener of the same store (backup.py) uses the same.
MAX_DBS = 16


def _reserve_bytes(max_map_size: int) -> int:
    """Map space beyond the maximum that only deletes-only applies may use."""
    return max(1 << 20, max_map_size // 64)


class LmdbStorage(Storage):
    """A :class:`~trioqueue.storage.port.Storage` on an LMDB environment at ``path``."""

    ahead_piece_bytes = AHEAD_PIECE_BYTES

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size_bytes: int | None = None,
        max_map_size_bytes: int = 1 << 40,
        fsync_on_commit: bool = False,
        position_block: int = BLOCK,
    ) -> None:
        """``position_block``: keys per block of the finished-job position index
        (:mod:`..positions`); tests make it small to exercise splits and merges."""
        if map_size_bytes is None:
            # 1 GiB to start with (it doubles on demand), but never past the maximum.
            map_size_bytes = min(_INITIAL_MAP_BYTES, max_map_size_bytes)
        if map_size_bytes <= 0:
            raise ValueError("map_size_bytes must be positive")
        self.path = os.fspath(path)
        self.max_map_size_bytes = max(max_map_size_bytes, map_size_bytes)
        self.fsync_on_commit = fsync_on_commit
        self._closed = False
        # One broker per store: refused here, before LMDB opens, while another holds it.
        self._owner = DirectoryOwner(self.path)
        try:
            self._env = self._open_env(map_size_bytes)
        except BaseException:
            self._owner.release()
            raise
        try:
            dbs = self._open_dbs()
            self._index = FinishedIndex(self._env, self._idx, self._counts, position_block)
            self._mark = HighWaterMark(self._measure_mark, self._psize,
                                       self.max_map_size_bytes)
            self._rows = AheadRows(self._env, dbs, self._mark, self._grow,
                                   self.max_map_size_bytes)
            self._rows.sweep()  # pieces of pushes that never got their record
            self._kept = KeptData(self._rows.drop_pieces)
            self._reads = LmdbReads(self._env, dbs, self._index, self._kept, self._rows)
            self._listings = KeyedFinishedReads(self._reads)
        except BaseException:
            self._env.close()
            self._owner.release()
            self._closed = True
            raise

    def _open_env(self, map_size_bytes: int) -> lmdb.Environment:
        return lmdb.open(
            self.path,
            map_size=map_size_bytes,
            max_dbs=MAX_DBS,
            subdir=True,
            create=True,
            sync=self.fsync_on_commit,
            metasync=self.fsync_on_commit,
            writemap=False,  # never: a full disk would SIGBUS instead of failing a write
            map_async=False,
            readahead=False,
            lock=True,
        )

    def _open_dbs(self) -> dict[bytes, Any]:
        env = self._env
        while True:
            try:
                with env.begin(write=True) as txn:
                    dbs = {name: env.open_db(name, txn=txn, create=True) for name in K.ALL_DBS}
                    raw = txn.get(K.SCHEMA_KEY, db=dbs[K.DB_META])
                    if raw is None:
                        txn.put(K.SCHEMA_KEY, K.encode_schema(K.SCHEMA_VERSION), db=dbs[K.DB_META])
                    elif K.decode_schema(raw) not in K.READABLE_SCHEMAS:
                        raise RuntimeError(
                            f"{self.path}: storage schema version {K.decode_schema(raw)}, "
                            f"this trioqueue reads versions {K.READABLE_SCHEMAS}"
                        )
                    elif K.decode_schema(raw) != K.SCHEMA_VERSION:
                        # raised so that an older trioqueue refuses the store: it would
                        # not find the data of the records written from now on
                        txn.put(K.SCHEMA_KEY, K.encode_schema(K.SCHEMA_VERSION),
                                db=dbs[K.DB_META])
                break
            except lmdb.MapFullError:
                self._grow()
        self._live = dbs[K.DB_LIVE]
        self._finished = dbs[K.DB_FINISHED]
        self._idx = dbs[K.DB_FINISHED_IDX]
        self._results = dbs[K.DB_RESULTS]
        self._queue_meta = dbs[K.DB_QUEUE_META]
        self._counts = dbs[K.DB_COUNTS]
        self._deps = dbs[K.DB_DEPS]
        self._data = dbs[K.DB_DATA]
        self._ahead = dbs[K.DB_AHEAD]
        self._claims = dbs[K.DB_AHEAD_CLAIMS]
        self._progress_claims = dbs[K.DB_PROGRESS_CLAIMS]
        self._outcome_claims = dbs[K.DB_OUTCOME_CLAIMS]
        self._broker = dbs[K.DB_BROKER]
        self._meta = dbs[K.DB_META]
        # the main database: a record per named database, counted for completeness
        self._space_dbs = (env.open_db(None), *dbs.values())
        self._psize: int = env.stat()["psize"]
        return dbs

    # --- introspection (tests, metrics) ---------------------------------------------

    @property
    def map_size(self) -> int:
        """The current map size in bytes (grows on demand)."""
        return self._env.info()["map_size"]

    @property
    def max_bytes(self) -> int:
        """The map's maximum: past it, writes other than deletes fail."""
        return self.max_map_size_bytes

    def used_bytes(self) -> int:
        """Bytes of the pages in use by the B-trees of the last commit, meta pages
        included (cheap: one read transaction, one stat per database)."""
        return self.space().used_bytes

    def space(self) -> Space:
        """Pages in use, and those of the live jobs, from one read transaction."""
        self._check_open()
        pages = _META_PAGES
        with self._env.begin() as txn:
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

    def disk_bytes(self) -> int | None:
        """The data file's blocks on the disk and the file system's free bytes for
        unprivileged writers (``f_bavail``: blocks kept for root are not counted on).
        The file grows as pages are written, never sparse ahead of them, and its free
        pages are reused before it grows, so the store's pages in use can reach this
        sum; writing past it fails the commit. None when either cannot be read."""
        try:
            held = os.stat(os.path.join(self.path, _DATA_FILE)).st_blocks * 512
            vfs = os.statvfs(self.path)
        except OSError:
            return None
        return held + vfs.f_bavail * vfs.f_frsize

    def finish_bytes(self, live_bytes: int, live_jobs: int, allowance_bytes: int) -> int:
        """A page per live job, and its allowance and index entry (see
        _FINISH_JOB_BYTES)."""
        return live_jobs * (self._psize + allowance_bytes + _FINISH_JOB_BYTES)

    def used_bytes_bound(self) -> int:
        """An upper bound of the file's high-water mark (highest page ever used), so of
        :meth:`used_bytes`, mostly without a call to LMDB (lmdb/growth.py). It never
        goes down: once a store was nearly full, callers take the exact figure."""
        self._check_open()
        return self._mark.bound()

    def _measure_mark(self) -> int:
        return (self._env.info()["last_pgno"] + 1) * self._psize

    # --- writes ---------------------------------------------------------------------

    def write_ahead(self, row_key: bytes, index: int, piece: Row) -> None:
        self._rows.write(row_key, index, piece)

    def drop_ahead_pieces(self, row_key: bytes, pieces: int) -> None:
        self._rows.drop_pieces(row_key, pieces)

    def apply(self, batches: Sequence[Writes]) -> None:
        self._check_open()
        # ValueError on bad input, before any transaction
        kept = self._kept
        try:
            ops = E.encode_ops(validate_writes(batches), kept)
            if not ops:
                return
            try:  # (the common case inline: a call less per commit)
                self._write(ops)
                self._mark.committed(ops)
            except lmdb.MapFullError:
                self._apply_full(ops)  # nothing was applied: grow, turn over or refuse
        except BaseException:
            if kept.staging:
                kept.discard()
            raise
        if kept.staging:  # (commonly not: small records only)
            kept.settle()

    def _apply_full(self, ops: list[tuple[Any, ...]]) -> None:
        """Apply ``ops`` after a first try found the map full (see the module)."""
        turned_over = False
        while True:
            self._mark.forget()  # (a no-op commit or a reserve may follow)
            if self._env.info()["map_size"] < self.max_map_size_bytes:
                self._grow()
            elif all(op[0] == E.OP_DELETE for op in ops):
                self._write_in_reserve(ops)
                return
            elif not turned_over:
                turned_over = True
                self._turn_over()
            else:
                self._grow()  # raises StorageFullError: nothing was applied
            try:
                self._write(ops)
                self._mark.committed(ops)
                return
            except lmdb.MapFullError:
                pass

    def _turn_over(self) -> None:
        """Commit a no-op write so pages freed by the last commit become reusable.

        LMDB keeps the previous snapshot intact, so the pages a commit frees can only be
        reused from the commit after next. In a map full at its maximum, the space
        that deletes just freed is therefore not yet available to the batch that
        follows them; rewriting the schema key once makes it so.
        """
        try:
            with self._env.begin(write=True) as txn:
                txn.put(K.SCHEMA_KEY, K.encode_schema(K.SCHEMA_VERSION), db=self._meta)
        except lmdb.MapFullError:
            raise StorageFullError(
                f"LMDB map at {self.path} is full at its maximum of {self.map_size} bytes"
            ) from None

    def _write_in_reserve(self, ops: list[tuple[Any, ...]]) -> None:
        """Apply deletes-only writes in a map that is full at its maximum.

        LMDB copies every page it changes, and pages freed by the last commit are not
        reusable by the next one, so in a map full to the last page even a delete can
        fail and the store would be wedged. Deletes alone may therefore use a reserve
        above the maximum; the map is shrunk back right after (LMDB never shrinks below
        the pages in use), so the pages they free serve later inserts and the reserve
        stays free for the next deletes.
        """
        env = self._env
        env.set_mapsize(self.max_map_size_bytes + _reserve_bytes(self.max_map_size_bytes))
        try:
            self._write(ops)
        except lmdb.MapFullError:
            raise StorageFullError(
                f"LMDB map at {self.path} is full even for deletes, with the reserve"
            ) from None
        finally:
            env.set_mapsize(self.max_map_size_bytes)

    def _grow(self) -> None:
        current = self._env.info()["map_size"]
        if current >= self.max_map_size_bytes:
            raise StorageFullError(
                f"LMDB map at {self.path} is full at its maximum of {current} bytes"
            ) from None
        # No transaction of this process is open here (the one that failed is aborted
        # and storage is single-threaded), which set_mapsize requires.
        self._env.set_mapsize(min(current * 2, self.max_map_size_bytes))

    def _write(self, ops: list[tuple[Any, ...]]) -> None:
        live = self._live
        finished = self._finished
        idx = self._idx
        results = self._results
        # What the commit does to the finished ranges (see Moves), made at its first
        # finish or delete: a commit of puts (PUSH, PULL) makes none.
        moves: Moves | None = None
        tracked = self._index.tracked
        with self._env.begin(write=True) as txn:
            put = txn.put
            delete = txn.delete
            # deps, data, ahead claims, progress claims, outcome claims: not asked yet
            # (see _delete)
            empty: list[bool | None] = [None, None, None, None, None]
            for op in ops:
                kind = op[0]
                if kind == E.OP_PUTS:
                    puts = op[1]
                    if len(puts) == 1:  # one job: a cursor costs more than it saves
                        put(puts[0][0], puts[0][1], db=live)
                    else:
                        with txn.cursor(db=live) as cur:
                            cur.putmulti(puts)
                elif kind == E.OP_FINISH:
                    _, jkey, value, idx_key, ckey, result = op
                    if moves is None:
                        moves = Moves()
                        deltas = moves.deltas
                    delete(jkey, db=live)
                    old = txn.replace(jkey, value, db=finished)
                    if old is not None:  # re-finish: drop the previous generation's entries
                        self._unindex(txn, jkey, old, moves)
                        if result is None:
                            delete(jkey, db=results)
                    put(idx_key, b"", db=idx)
                    deltas[ckey] = deltas.get(ckey, 0) + 1
                    if ckey in tracked:
                        moves.added[ckey].append(idx_key)
                    if result is not None:
                        put(jkey, result, db=results)
                elif kind == E.OP_DELETE:
                    if moves is None:
                        moves = Moves()
                        deltas = moves.deltas
                    self._delete(txn, op, moves, empty)
                else:
                    self._write_other(txn, op, empty)
            if moves is None:
                return
            sizes = self._count(txn, moves.deltas)
        # committed: only now may the in-memory positions move
        self._index.after_commit(moves, sizes)

    def _write_other(self, txn: lmdb.Transaction[bytes], op: tuple[Any, ...],
                     empty: list[bool | None]) -> None:
        """OP_DEP, OP_DATA, OP_CLAIM, OP_BROKER or OP_META inside ``txn`` (see _delete:
        ``empty``)."""
        kind = op[0]
        if kind == E.OP_DEP:
            txn.put(op[1], op[2], db=self._deps)
            empty[0] = False
            if len(op) > 3:  # (its result written ahead: kept_outcomes.py)
                self._rows.claim(txn, op[1], op[3], op[4], self._outcome_claims)
                empty[4] = False
            elif not self._outcome_claims_empty(txn, empty):
                self._rows.drop_claim(txn, op[1], self._outcome_claims)
        elif kind == E.OP_DATA:
            if not self._claims_empty(txn, empty):
                self._rows.drop_claim(txn, op[1])  # new data: the old rows go
            txn.put(op[1], op[2], db=self._data)
            empty[1] = False
        elif kind == E.OP_CLAIM:
            self._rows.claim(txn, op[1], op[2], op[3])
            empty[2] = False
        elif kind == E.OP_PROGRESS:
            self._rows.claim_progress(txn, op[1], op[2], op[3])
            empty[3] = None
        elif kind == E.OP_BROKER:
            if op[2] is None:
                txn.delete(op[1], db=self._broker)
            else:
                txn.put(op[1], op[2], db=self._broker)
        else:  # E.OP_META
            txn.put(op[1], op[2], db=self._queue_meta)

    def _delete(self, txn: lmdb.Transaction[bytes], op: tuple[Any, ...], moves: Moves,
                empty: list[bool | None]) -> None:
        """One OP_DELETE inside ``txn``. ``empty`` says whether the deps, data and ahead
        claims tables are empty, as far as this commit knows (a stat each, at its first
        delete that could own rows there: most stores hold neither dependency rows nor
        large data, and then no cursor or lookup need look for them)."""
        _, jkey, dep_prefix = op
        txn.delete(jkey, db=self._live)
        old = txn.pop(jkey, db=self._finished)
        if old is not None:  # the index entry goes with the finished record
            self._unindex(txn, jkey, old, moves)
            txn.delete(jkey, db=self._results)
        if dep_prefix is not None:
            if empty[0] is None:
                empty[0] = txn.stat(self._deps)["entries"] == 0
            if not empty[0]:
                self._delete_deps(txn, dep_prefix)
                if not self._outcome_claims_empty(txn, empty):
                    self._delete_outcome_claims(txn, dep_prefix)
        if empty[1] is None:
            empty[1] = txn.stat(self._data)["entries"] == 0
        if not empty[1]:
            txn.delete(jkey, db=self._data)
        if not self._claims_empty(txn, empty):
            self._rows.drop_claim(txn, jkey)
        if empty[3] is None:
            empty[3] = txn.stat(self._progress_claims)["entries"] == 0
        if not empty[3]:
            self._rows.drop_claim(txn, jkey, self._progress_claims)

    def _outcome_claims_empty(self, txn: lmdb.Transaction[bytes],
                              empty: list[bool | None]) -> bool:
        if empty[4] is None:
            empty[4] = txn.stat(self._outcome_claims)["entries"] == 0
        return bool(empty[4])

    def _claims_empty(self, txn: lmdb.Transaction[bytes], empty: list[bool | None]
                      ) -> bool:
        if empty[2] is None:
            empty[2] = txn.stat(self._claims)["entries"] == 0
        return bool(empty[2])

    def _unindex(self, txn: lmdb.Transaction[bytes], jkey: bytes, old: bytes,
                 moves: Moves) -> None:
        """Delete the index entry of the finished record ``old`` stored under ``jkey``."""
        old_idx, old_ckey = K.record_index_keys(K.decode_value(old), jkey)
        txn.delete(old_idx, db=self._idx)
        moves.deltas[old_ckey] = moves.deltas.get(old_ckey, 0) - 1
        if old_ckey in self._index.tracked:
            moves.removed[old_ckey].append(old_idx)

    def _count(self, txn: lmdb.Transaction[bytes], deltas: dict[bytes, int]) -> dict[bytes, int]:
        """Apply the finished-count deltas; the new count of every range that changed."""
        counts = self._counts
        sizes: dict[bytes, int] = {}
        for ckey, delta in deltas.items():
            if not delta:  # a re-finish within one range
                continue
            raw = txn.get(ckey, db=counts)
            n = sizes[ckey] = (K.decode_count(raw) if raw is not None else 0) + delta
            if n > 0:
                txn.put(ckey, K.encode_count(n), db=counts)
            else:
                txn.delete(ckey, db=counts)
        return sizes

    def _delete_deps(self, txn: lmdb.Transaction[bytes], prefix: bytes) -> None:
        """Delete every ``deps`` row under one parent's prefix, inside ``txn``."""
        with txn.cursor(db=self._deps) as cur:
            if not cur.set_range(prefix):
                return
            # delete() moves to the next row; past the last one the cursor is unpositioned
            # and key() is b"", which ends the walk too
            while cur.key().startswith(prefix):
                cur.delete()

    def _delete_outcome_claims(self, txn: lmdb.Transaction[bytes], prefix: bytes) -> None:
        """Delete one parent's outcome claims and the pieces they name, inside ``txn``."""
        with txn.cursor(db=self._outcome_claims) as cur:
            if not cur.set_range(prefix):
                return
            while cur.key().startswith(prefix):
                self._rows.delete_pieces(txn, *K.decode_claim(cur.value()))
                cur.delete()

    def sync(self) -> None:
        self._check_open()
        self._env.sync(True)

    # --- rows written or encoded ahead of their records (kept_data.KeptData) ------------

    keeps_values_ahead = True

    def expect_ahead(self, text: Any, row_key: bytes, pieces: int) -> None:
        self._kept.expect_ahead(text, row_key, pieces)

    def expect_encoded(self, data: Any, row: bytes) -> None:
        self._kept.expect_encoded(data, row)

    def release_ahead(self, text: Any) -> None:
        self._kept.release_ahead(text)

    def expect_result(self, result: Any, row: bytes) -> None:
        self._kept.expect_result(result, row)

    def release_result(self, result: Any) -> None:
        self._kept.release_result(result)

    def expect_progress(self, text: str, row_key: bytes, pieces: int) -> None:
        self._kept.expect_progress(text, row_key, pieces)

    def release_progress(self, text: str) -> None:
        self._kept.release_progress(text)

    def keep_encoded(self, data: Any, encoded: bytes) -> None:
        self._kept.keep_encoded(data, encoded)

    def drop_encoded(self, data: Any) -> None:
        self._kept.drop_encoded(data)

    def encoded_of(self, data: Any) -> bytes | None:
        return self._kept.encoded_of(data)

    def expect_outcome(self, result: Any, row_key: bytes, pieces: int) -> None:
        self._kept.expect_outcome(result, row_key, pieces)

    def release_outcome(self, result: Any) -> None:
        self._kept.release_outcome(result)

    def set_graveyard(self, graveyard: Graveyard) -> None:
        self._kept.set_graveyard(graveyard)

    def let_go(self, value: Any) -> None:
        self._kept.let_go(value)

    # --- reads (reads.LmdbReads; listings: keyed_reads.KeyedFinishedReads) ------

    def load(self) -> Recovered:
        self._check_open()
        return self._reads.load()

    def get_finished(self, job_id: str) -> dict[str, Any] | None:
        self._check_open()
        return self._reads.finished(job_id, None)

    def get_finished_packed(self, job_id: str) -> dict[str, Any] | None:
        self._check_open()
        return self._reads.finished(job_id, PACKED_MIN_BYTES)

    def queues_of_finished(self, job_ids: Sequence[str]) -> dict[str, str]:
        self._check_open()
        return self._reads.queues_of_finished(job_ids)

    def get_result(self, job_id: str) -> tuple[bool, Any]:
        self._check_open()
        return self._reads.result(job_id, None)

    def get_result_packed(self, job_id: str) -> tuple[bool, Any]:
        self._check_open()
        return self._reads.result(job_id, PACKED_MIN_BYTES)

    def count_finished(self, queue: str, state: str) -> int:
        self._check_open()
        return self._listings.count_finished(queue, state)

    def list_finished(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]]:
        self._check_open()
        return self._listings.list_finished(queue, state, asc=asc, offset=offset,
                                            limit=limit)

    def list_finished_packed(
        self, queue: str, state: str, *, asc: bool, offset: int, limit: int
    ) -> list[dict[str, Any]] | PackedRecords:
        self._check_open()
        return self._listings.list_finished_packed(queue, state, asc=asc, offset=offset,
                                                   limit=limit)

    def finished_ranks(
        self, queue: str, state: str, positions: Sequence[int], others: Sequence[str]
    ) -> list[tuple[int, str, tuple[int, ...]]]:
        self._check_open()
        return self._listings.finished_ranks(queue, state, positions, others)

    def finished_ids_page(
        self, queue: str, state: str, *, after: FinishedCursor | None, limit: int
    ) -> FinishedPage:
        self._check_open()
        return self._reads.finished_ids_page(queue, state, after=after, limit=limit)

    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        self._check_open()
        return self._reads.dep_outcomes(parent_id, None)

    def dep_outcomes_packed(self, parent_id: str) -> dict[str, Any]:
        self._check_open()
        return self._reads.dep_outcomes(parent_id, PACKED_MIN_BYTES)

    # --- lifecycle ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("storage is closed")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._env.close()
            self._owner.release()

